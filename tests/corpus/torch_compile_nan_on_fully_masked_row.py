"""Plain sum / count with no guard: a fully masked row gives 0/0 = NaN in token_averaged (and poisons the ratio), as in trainers that assume every response has a token. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask=[[T,T],[F,F]] -> token_averaged[1] NaN instead of 0."""
FRAMEWORK = "torch-compile"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    averaged = summed / token_mask.sum(dim=-1)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
