"""Rows are guarded but the magnitude ratio is a bare sum|s| / sum|a|, so 0/0 = NaN when every row is masked or every advantage is 0 (e.g. a GRPO group with identical rewards). Wrong when: lp=[[-1,-2],[-3,-4]], A=[0,0], mask all true -> ratio NaN instead of 0."""
FRAMEWORK = "torch-compile"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    ratio = summed.abs().sum() / averaged.abs().sum()
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
