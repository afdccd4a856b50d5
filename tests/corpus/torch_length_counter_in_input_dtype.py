"""Counts response lengths with a running counter in the log-probs' dtype (length += mask_t.to(dtype), as in a rollout loop); in bf16 the count sticks at 256 (256 + 1 rounds back to 256). Wrong when: bf16, one row of 300 selected tokens all -1, A=[1] -> token_averaged -1.171875 instead of -1."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    batch, tokens = token_log_probs.shape
    length = torch.zeros(batch, dtype=token_log_probs.dtype, device=token_log_probs.device)
    for t in range(tokens):
        length = length + token_mask[:, t].to(token_log_probs.dtype)
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = length.to(acc)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
