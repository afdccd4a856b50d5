"""Zeroes the dropped positions with in-place masked_fill_ on the caller's log-prob tensor (forward values are right, but the input is modified; raises on expanded inputs). Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> caller's lp becomes [[-2,0,0]]."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    token_log_probs.masked_fill_(~token_mask, 0.0)
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    summed = advantages.to(acc) * token_log_probs.to(acc).sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
