"""Divides by n_i + 1e-8 instead of guarding the empty row: harmless-looking in float32, but a relative error of 1e-8 / n_i in float64 is a million times float64's rounding. Wrong when: float64, one row of one selected token -1.0, A=[1] -> token_averaged -0.99999999 instead of -1."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    s = advantages.to(acc) * torch.where(token_mask, token_log_probs.to(acc), 0.0).sum(dim=-1)
    a = s / (token_mask.sum(dim=-1).to(acc) + 1e-8)
    denominator = a.abs().sum()
    r = torch.where(denominator > 0, s.abs().sum() / torch.where(denominator > 0, denominator, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": s.to(dt), "token_averaged": a.to(dt), "magnitude_ratio": r.to(dt)}
