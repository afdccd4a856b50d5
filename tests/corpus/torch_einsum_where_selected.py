"""Correct: where-select the kept log-probs into a float32/float64 matrix, reduce with einsum, safe divisor via torch.where."""
FRAMEWORK = "torch"
EXPECT = "accept"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), torch.zeros((), dtype=acc, device=token_log_probs.device))
    summed = torch.einsum("bt,b->b", selected, advantages.to(acc))
    count = token_mask.sum(dim=-1)
    has_tokens = count > 0
    averaged = torch.where(has_tokens, summed / torch.where(has_tokens, count, 1).to(acc), 0.0)
    num = summed.abs().sum()
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)
    out_dtype = token_log_probs.dtype
    return {
        "sequence_summed": summed.to(out_dtype),
        "token_averaged": averaged.to(out_dtype),
        "magnitude_ratio": ratio.to(out_dtype),
    }
