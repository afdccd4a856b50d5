"""A verl-style `agg_loss` (verl/trainer/ppo/core_algos.py), as a trainer writes it: one function, four modes,
the step's global counts passed in when the batch is split over micro-batches and ranks.

README's "Check your own function" fuzzes it three ways: each mode as a single-process reduction, the per-chunk
form over micro-batches and ranks, and the padded-width default of seq-mean-token-sum-norm (a real trap: verl
divides by `loss_mask.shape[-1]` unless `loss_scale_factor` is given).
"""

import torch


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
             loss_scale_factor=None):
    mask = loss_mask.bool()
    acc = torch.promote_types(loss_mat.dtype, torch.float32)  # sums in at least float32
    masked = torch.where(mask, loss_mat.to(acc), 0.0)  # select, don't multiply: padding may hold -inf or NaN
    if batch_num_tokens is None:
        batch_num_tokens = mask.sum()
    if global_batch_size is None:
        global_batch_size = mask.any(dim=-1).sum()  # the rows with a selected token
    if loss_agg_mode == "token-mean":
        return masked.sum() / max(batch_num_tokens, 1) * dp_size
    if loss_agg_mode == "token-sum":
        return masked.sum() * dp_size
    row_sums = masked.sum(dim=-1)
    if loss_agg_mode == "seq-mean-token-mean":
        row_sums = row_sums / mask.sum(dim=-1).clamp(min=1)
    elif loss_agg_mode == "seq-mean-token-sum-norm":
        row_sums = row_sums / (loss_scale_factor or loss_mask.shape[-1])  # verl's default: the padded width
    elif loss_agg_mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}")
    return row_sums.sum() / max(global_batch_size, 1) * dp_size


def fixed_length_default(token_losses, token_mask):
    """seq-mean-token-sum-norm as verl calls it by default: no loss_scale_factor."""
    return agg_loss(token_losses, token_mask, "seq-mean-token-sum-norm")


def chunk_loss(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, **_):
    """The per-chunk form (`check --accumulation`): verl passes the step's global counts and multiplies by
    dp_size against FSDP's mean over ranks; each micro-batch's loss is backpropagated unscaled."""
    return agg_loss(token_losses, token_mask, "token-mean", dp_size=dp_size, batch_num_tokens=num_tokens,
                    global_batch_size=num_sequences)
