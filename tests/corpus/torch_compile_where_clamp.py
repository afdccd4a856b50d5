"""Correct, compiled: float32/float64 where-select, clamp(min=1) on counts, where-guarded ratio with a safe divisor."""
FRAMEWORK = "torch-compile"
EXPECT = "accept"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    lp = token_log_probs.to(acc)
    row = torch.where(token_mask, lp, 0).sum(dim=-1)
    summed = advantages.to(acc) * row
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1).to(acc), 0)
    den = averaged.abs().sum()
    ok = den > 0
    ratio = torch.where(ok, summed.abs().sum() / torch.where(ok, den, 1), 0)
    out = token_log_probs.dtype
    return {"sequence_summed": summed.to(out), "token_averaged": averaged.to(out), "magnitude_ratio": ratio.to(out)}
