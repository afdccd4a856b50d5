"""Re-applies the next-token shift to an already aligned mask (lp[:, :-1] paired with mask[:, 1:]), so every selected position is off by one token. Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> sequence_summed 0 instead of -6."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    lp = token_log_probs[:, :-1].to(acc)
    m = token_mask[:, 1:]
    summed = advantages.to(acc) * torch.where(m, lp, 0.0).sum(dim=-1)
    n = m.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
