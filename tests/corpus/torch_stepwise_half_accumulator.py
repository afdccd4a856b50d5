"""Accumulates the sequence log-prob step by step, as a rollout loop does (total += where(mask_t, lp_t, 0)), with the running total kept in the input dtype, so bf16/fp16 rows drift. Wrong when: bf16, one row of 3000 selected tokens all -0.37 (bf16 -0.369140625), A=[1] -> sequence_summed -128 instead of -1104; already 24 tokens all -1.296875 give -30.75 instead of -31.125."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    batch, tokens = token_log_probs.shape
    total = torch.zeros(batch, dtype=token_log_probs.dtype, device=token_log_probs.device)
    for t in range(tokens):
        step = token_log_probs[:, t]
        total = total + torch.where(token_mask[:, t], step, torch.zeros_like(step))
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    summed = advantages.to(acc) * total.to(acc)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
