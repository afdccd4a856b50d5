"""Correct: the row's sum and its mean over selected tokens computed first, each then scaled by A_i, in the input dtype; the advantages reach both outputs by two autograd paths, so their gradient is the sum of two rounded products."""
FRAMEWORK = "torch"
EXPECT = "accept"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    row_sum = torch.where(token_mask, token_log_probs, torch.zeros_like(token_log_probs)).sum(dim=-1)
    row_mean = row_sum / token_mask.sum(dim=-1).clamp(min=1).to(row_sum.dtype)
    s = advantages * row_sum
    a = advantages * row_mean
    denominator = a.abs().sum()
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    r = torch.where(denominator > 0, s.abs().sum() / safe, torch.zeros_like(denominator))
    return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r}
