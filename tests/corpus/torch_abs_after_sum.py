"""Takes the absolute value after summing over the batch (|sum s| / |sum a|) instead of summing absolute values, so positive and negative advantages cancel. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,-1], mask=[[T,T],[T,F]] -> ratio 0 instead of 6/4.5."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.sum().abs()
    ratio = torch.where(den > 0, summed.sum().abs() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
