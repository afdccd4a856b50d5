"""Correct: float64 cumsum along tokens over a zero-padded, where-selected matrix; the last column is the row sum (padding keeps tokens == 0 valid)."""
FRAMEWORK = "torch"
EXPECT = "accept"
import torch
import torch.nn.functional as F


def loss_normalization(token_log_probs, advantages, token_mask):
    lp = token_log_probs.to(torch.float64)
    selected = torch.where(token_mask, lp, torch.zeros_like(lp))
    running = F.pad(selected, (1, 0)).cumsum(dim=-1)
    row_sums = running[:, -1]
    summed = advantages.to(torch.float64) * row_sums
    count = token_mask.sum(dim=-1).clamp(min=1).to(torch.float64)
    averaged = torch.where(token_mask.any(dim=-1), summed / count, torch.zeros_like(summed))
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / den.clamp(min=torch.finfo(torch.float64).tiny), torch.zeros_like(den))
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
