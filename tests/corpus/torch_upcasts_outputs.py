"""Accumulates in float32 (correctly) but forgets to cast the results back, so bf16/fp16 inputs get float32 outputs. Wrong when: any bfloat16 or float16 input, e.g. lp=[[-1,-2],[-3,-4]] in bf16 -> outputs are torch.float32."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
