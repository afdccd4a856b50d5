"""Detaches the advantages (policy-gradient habit: advantages are constants), so the forward is exact but no gradient reaches the advantages (grad None, i.e. 0). Wrong when: lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> d sum(sequence_summed) / dA is None/0 instead of [-3,-7]."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    adv = advantages.detach().to(acc)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = adv * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
