"""Cleans up 0/0 with torch.nan_to_num(s / n): the forward is right but nan_to_num only zeroes the incoming gradient, and 0 * (1/0) in the division's backward is still NaN. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask=[[T,T],[F,F]] -> dA[1] NaN."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    averaged = torch.nan_to_num(summed / token_mask.sum(dim=-1), nan=0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / den.clamp(min=torch.finfo(acc).tiny), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
