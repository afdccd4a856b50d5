"""The canonical per-rank PyTorch implementation under torch.distributed: the one to copy into a trainer
that splits rows over data-parallel ranks and each row's tokens over sequence-parallel ranks.

Each rank holds rows [r0, r1) and tokens [t0, t1) of the global batch (either may be empty), the
advantages of its rows, and two process groups: `sequence_group` (the ranks holding the other token
slices of the same rows) and `data_group` (the ranks holding the same token slice of the other rows).
The default group is every rank of the mesh.

Every choice answers a bug trainers have shipped:
- a row's sum and its count are partial on each rank: both are reduced over the sequence group (SUM,
  never AVG) before anything is divided; a count taken on the local token slice is wrong;
- sums and counts travel in one tensor, one all-reduce: half the latency, and they cannot drift apart;
- the ratio's N and D are summed over every rank, never a mean of per-rank ratios (a mean of ratios is
  not the ratio of sums); rows are counted once: each rank of a sequence group holds the full row values
  after the first reduction, so only the sequence rank 0 contributes them to N and D;
- the collectives are autograd-aware (`torch.distributed.nn.functional.all_reduce`): a plain
  `torch.distributed.all_reduce` gives the right forward and silently wrong gradients;
- counts are exact in float32 below 2^24 tokens per row (float64 for float64 inputs);
- the single-process rules hold: masked positions selected away, safe divisors before dividing.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

from impls.torch_eager import validate


def _all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """SUM all-reduce that autograd differentiates (its backward is a SUM all-reduce of the gradients).

    torch 2.13 deprecates torch.distributed.nn.functional in favour of _functional_collectives, which has
    no differentiable all_reduce yet; the warning is silenced here only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return dist_nn.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)


def sequence_vs_token_normalization(
    token_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    token_mask: torch.Tensor,
    *,
    data_group: dist.ProcessGroup | None,
    sequence_group: dist.ProcessGroup | None,
) -> dict[str, torch.Tensor]:
    """This rank's rows' sequence-summed and token-averaged weights and the global magnitude ratio.

    token_log_probs, token_mask: (rows, tokens) shard; advantages: (rows,). Returns (rows,), (rows,) and ()
    tensors in the log-probs' dtype on their device, the same on every rank of the sequence group (the
    ratio: the same on every rank)."""
    validate(token_log_probs, advantages, token_mask)
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    # Local partial sums and counts; where() keeps -inf/NaN in masked positions out of the sum and the
    # backward (its derivative at unselected positions is exactly 0).
    partial_sums = torch.where(token_mask, token_log_probs, 0).sum(dim=-1, dtype=accumulate)
    partial_counts = token_mask.sum(dim=-1, dtype=accumulate)  # exact below 2^24 tokens (float32)
    both = _all_reduce(torch.stack([partial_sums, partial_counts]), sequence_group)
    selected_sums, counts = both[0], both[1]

    sequence_summed = advantages.to(accumulate) * selected_sums
    token_averaged = sequence_summed / counts.clamp(min=1)  # empty rows: 0 / 1 = 0

    # Each row's values are now on every rank of its sequence group: count them once, on sequence rank 0.
    first = dist.get_rank(sequence_group) == 0
    weight = 1.0 if first else 0.0
    local = torch.stack([sequence_summed.abs().sum() * weight, token_averaged.abs().sum() * weight])
    numerator, denominator = _all_reduce(local, None)  # every rank of the mesh: the default group
    has_denominator = denominator > 0
    safe_denominator = torch.where(has_denominator, denominator, torch.ones_like(denominator))
    magnitude_ratio = torch.where(has_denominator, numerator / safe_denominator, torch.zeros_like(numerator))
    out_dtype = token_log_probs.dtype
    return {
        "sequence_summed": sequence_summed.to(out_dtype),
        "token_averaged": token_averaged.to(out_dtype),
        "magnitude_ratio": magnitude_ratio.to(out_dtype),
    }
