"""Correct: the plain solution, computed in the input dtype as the problem's hints write it (row sums by torch, which accumulates half inputs in float32; the product with A_i, the count's cast and the division rounded in the input dtype; a where-guarded ratio with a safe divisor). Half-precision gradients of its ratio overflow where N / D^2 exceeds float16's range: that is float16's limit, reported as an overflow, not a rounding error."""
FRAMEWORK = "torch"
EXPECT = "accept"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    s = advantages * torch.where(token_mask, token_log_probs, torch.zeros_like(token_log_probs)).sum(dim=-1)
    a = s / token_mask.sum(dim=-1).clamp(min=1).to(s.dtype)
    numerator, denominator = s.abs().sum(), a.abs().sum()
    has_denominator = denominator > 0
    r = torch.where(has_denominator, numerator / torch.where(has_denominator, denominator, torch.ones_like(denominator)), torch.zeros_like(denominator))
    return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r}
