"""Flattens with .view(-1) and scatters into rows with index_add_; .view raises on non-contiguous inputs (transposed or step-sliced batches). Wrong when: lp = torch.tensor([[-1.,-3.],[-2.,-4.]]).t() (transposed view) -> RuntimeError."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    batch, tokens = token_log_probs.shape
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    flat_lp = token_log_probs.view(-1).to(acc)
    flat_mask = token_mask.view(-1)
    row_ids = torch.arange(batch, device=token_log_probs.device).repeat_interleave(tokens)
    kept = torch.where(flat_mask, flat_lp, 0.0)
    row_sums = torch.zeros(batch, dtype=acc, device=token_log_probs.device).index_add_(0, row_ids, kept)
    summed = advantages.to(acc) * row_sums
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
