"""Broadcasts advantages along the token axis (advantages[None, :] instead of [:, None]); it only runs when batch == tokens (or either is 1) and then weights token t by A_t. Wrong when: batch == tokens == 2, lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> sequence_summed [0,-2] instead of [-6,7]."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = (advantages.to(acc)[None, :] * selected).sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
