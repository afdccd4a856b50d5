"""Correct seq-mean-token-sum over every row, written the way a trainer that accumulates micro-batches must: the (sum, count) pair first, as tunix's `aggregate_loss` returns it (tunix@c7d8950f:tunix/rl/common.py::aggregate_loss, `WeightedMetric(unreduced_sum, denominator, min_denom)`) and verl divides by a global_batch_size counted before the micro split (verl@1dda039b:verl/workers/engine/fsdp/transformer_impl.py, l.705-711), then one division at the end, floored and zero-safe, so summing micro-batch pairs before dividing gives the full-batch loss. Selection by torch.where, sums in float32 (float64 stays float64)."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum"
ROWS = "all"
import torch


def aggregate(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    unreduced_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    denominator = torch.tensor(token_mask.shape[0], device=token_mask.device)
    return unreduced_sum, denominator


def loss_normalization(token_losses, token_mask):
    unreduced_sum, denominator = aggregate(token_losses, token_mask)  # (micro-batch pairs would be summed here)
    return torch.where(denominator > 0, unreduced_sum / denominator.clamp(min=1), 0.0)
