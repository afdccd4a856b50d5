"""Correct: the vectors are computed in float32 and rounded to the input dtype, and the ratio's sums are then taken over those rounded outputs (in float32), as code that reuses its returned tensors does."""
FRAMEWORK = "torch"
EXPECT = "accept"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    acc = torch.promote_types(dt, torch.float32)
    row_sum = torch.where(token_mask, token_log_probs, torch.zeros_like(token_log_probs)).sum(dim=-1, dtype=acc)
    s = (advantages.to(acc) * row_sum).to(dt)
    a = (advantages.to(acc) * row_sum / token_mask.sum(dim=-1).clamp(min=1)).to(dt)
    numerator = s.to(acc).abs().sum()
    denominator = a.to(acc).abs().sum()
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    r = torch.where(denominator > 0, numerator / safe, torch.zeros_like(denominator))
    return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r.to(dt)}
