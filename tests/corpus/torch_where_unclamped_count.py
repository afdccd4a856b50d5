"""Forward-correct where(n > 0, s / n, 0) with an unclamped n: the discarded 0/0 branch is NaN and its backward (0 * 1/0) gives NaN gradients. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask=[[T,T],[F,F]] -> d(token_averaged[1])/dA[1] is NaN instead of 0."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n, 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
