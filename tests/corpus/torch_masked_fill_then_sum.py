"""Correct: out-of-place masked_fill of the dropped positions in float32 (or float64), then sum; counts clamped to >= 1."""
FRAMEWORK = "torch"
EXPECT = "accept"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    dtype = token_log_probs.dtype
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    kept = token_log_probs.to(acc).masked_fill(~token_mask, 0.0)
    summed = advantages.to(acc) * kept.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    total_avg = averaged.abs().sum()
    safe = torch.where(total_avg > 0, total_avg, torch.ones_like(total_avg))
    ratio = torch.where(total_avg > 0, summed.abs().sum() / safe, torch.zeros_like(total_avg))
    return {"sequence_summed": summed.to(dtype), "token_averaged": averaged.to(dtype), "magnitude_ratio": ratio.to(dtype)}
