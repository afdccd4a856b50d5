"""Treats the ratio's normalizer as a constant (den.detach()), a common trick for loss normalizers; the forward is identical but d ratio / d lp misses the -N/D^2 dD term. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,-1], mask=[[T,T],[T,F]] -> d ratio / d lp[0,0] is -2/9 instead of -2/27."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum().detach()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
