"""Divides the sequence sum by the padded length (.mean over all token slots) instead of the selected-token count n_i, the classic masked-mean bug. Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> token_averaged -2 instead of -6."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    adv = advantages.to(acc)
    summed = adv * selected.sum(dim=-1)
    averaged = adv * selected.mean(dim=-1)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
