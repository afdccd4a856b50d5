"""Applies the mask by multiplication ((lp * mask).sum) instead of selecting, so -inf or NaN at masked positions turns into NaN (-inf * 0). Wrong when: lp=[[-1.5,-inf]], A=[1], mask=[[T,F]] -> sequence_summed NaN instead of -1.5."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    m = token_mask.to(acc)
    summed = advantages.to(acc) * (token_log_probs.to(acc) * m).sum(dim=-1)
    n = m.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
