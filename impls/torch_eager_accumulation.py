"""The canonical PyTorch per-chunk loss for gradient accumulation and data parallelism: the one to copy into a
trainer's micro-batch loop.

    num_tokens, num_sequences = global_normalizers(step_masks, rows="all", group=dp_group)  # before the loop
    for token_losses, token_mask in my_micro_batches:
        loss = chunk_loss(token_losses, token_mask, num_tokens=num_tokens, num_sequences=num_sequences,
                          dp_size=world, accumulation_steps=len(my_micro_batches), mode="token-mean")
        loss.backward()   # DDP averages the ranks' gradients at the last micro-batch

Every choice answers a bug trainers have shipped (reference/accumulation.py has the contract):
- the divisor is the step's N or D, counted over every micro-batch of every rank before the loop (all-reduced
  over the data-parallel group, SUM), never the micro-batch's own: a mean of micro-batch means weighs a short
  micro-batch's tokens more, 2x at two micro-batches (verl #6957), 32x at 32 (NeMo-RL #3791);
- the counts come from the very mask the losses are reduced with (TRL #6369 counted before truncated completions
  were masked), and empty rows count 0 tokens, never clamp(min=1) each (miles #2796);
- the compensation is applied once: x dp_size against DDP's mean over ranks (verl #5366 missed it), x G against a
  1/G backward scale (DeepSpeed, the HF Trainer), and nothing else (TRL #5619: 1/G twice);
- L_max is the declared constant, never the micro-batch's padded width;
- an empty micro-batch (no rows, or only fully masked ones) gives exactly 0 computed from its losses: its
  gradient exists and is 0, so DDP's reducer sees every parameter used.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from impls.torch_eager_reduction import _describe, row_sums_and_counts
from impls.validation import validate_inputs
from reference.accumulation import CONTRACT as ACCUMULATION


def global_normalizers(token_masks: Iterable[torch.Tensor], rows: str = "all",
                       group: object | None = None) -> tuple[int, int]:
    """(N, D) of a rank's step over every rank: the selected tokens, and the rows (every row for rows="all", the
    rows with a selected token for "nonempty"), of all its micro-batches, all-reduced (SUM) over `group` where
    torch.distributed is initialized. Python ints, the same on every rank."""
    masks = list(token_masks)
    counts = torch.zeros(2, dtype=torch.float64, device=masks[0].device if masks else "cpu")
    for mask in masks:
        per_row = mask.sum(dim=-1)
        counts[0] += per_row.sum()
        counts[1] += mask.shape[0] if rows == "all" else (per_row > 0).sum()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(counts, op=torch.distributed.ReduceOp.SUM, group=group)
    return int(counts[0].item()), int(counts[1].item())


def chunk_loss(token_losses: torch.Tensor, token_mask: torch.Tensor, *, num_tokens: int, num_sequences: int,
               dp_size: int, accumulation_steps: int, mode: str = "token-mean", rows: str | None = None,
               l_max: float | None = None, dp_reduce: str = "mean", backward_scale: str = "1") -> torch.Tensor:
    """One micro-batch's share of the step's loss of `mode`, with the step's normalizers: the sum over the step
    of these, times 1/R where DDP averages and 1/G where the backward is scaled so, is the full batch's loss."""
    validate_inputs(ACCUMULATION, (token_losses, token_mask), describe=_describe, kind="torch.Tensor")
    declared = ACCUMULATION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max,
                                                  "dp_reduce": dp_reduce, "backward_scale": backward_scale})
    sums, counts = row_sums_and_counts(token_losses, token_mask)
    mode = str(declared["mode"])
    if mode == "token-sum":
        loss = sums.sum()
    elif mode == "token-mean":
        loss = sums.sum() / max(num_tokens, 1)  # N = 0 on every rank: every sum is 0, and 0 / 1 = 0
    elif mode == "seq-mean-token-mean":
        loss = (sums / counts.to(sums.dtype).clamp(min=1)).sum() / max(num_sequences, 1)
    elif mode == "seq-mean-token-sum":
        loss = sums.sum() / max(num_sequences, 1)
    else:  # seq-mean-token-sum-norm: the declared L_max
        loss = sums.sum() / (max(num_sequences, 1) * float(declared["l_max"]))
    compensation = (dp_size if declared["dp_reduce"] == "mean" else 1) * (
        accumulation_steps if declared["backward_scale"] == "1/G" else 1)
    return (loss * compensation).to(sums.dtype)


def chunk_loss_on_ranks(token_losses: torch.Tensor, token_mask: torch.Tensor, *, step_masks: list[torch.Tensor],
                        group: object | None, accumulation_steps: int, mode: str = "token-mean",
                        rows: str | None = None, l_max: float | None = None, dp_reduce: str = "mean",
                        backward_scale: str = "1") -> torch.Tensor:
    """The same on a data-parallel rank that has only its own micro-batches: the step's normalizers counted over
    `step_masks` (this rank's micro-batches) and all-reduced over `group`, then `chunk_loss`."""
    num_tokens, num_sequences = global_normalizers(step_masks, ACCUMULATION.canonical_parameters(
        {"mode": mode, "rows": rows, "l_max": l_max})["rows"], group)
    dp_size = torch.distributed.get_world_size(group) if torch.distributed.is_initialized() else 1
    return chunk_loss(token_losses, token_mask, num_tokens=num_tokens, num_sequences=num_sequences, dp_size=dp_size,
                      accumulation_steps=accumulation_steps, mode=mode, rows=rows, l_max=l_max, dp_reduce=dp_reduce,
                      backward_scale=backward_scale)
