"""Zero-guards the ratio as where(D > 0, N / D, 0) with a raw D: the forward is 0 as required, but when D == 0 the discarded N/D branch makes every gradient NaN. Wrong when: lp=[[-1,-2],[-3,-4]], A=[0,0], mask all true -> d ratio / d lp is NaN."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    num = summed.abs().sum()
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, num / den, 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
