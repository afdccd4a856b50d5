"""The loss reduction as a fused Triton port: one kernel reads each row's losses and mask once for its sum and
count (impls/torch_triton.py's forward kernel: any strides, masked loads and `tl.where`, so padding never
enters), and the backward writes d l_it = m_it w_i in one pass (its gradient kernel: the row's weight at
selected positions, exactly 0 elsewhere). The few scalars between are impls/torch_eager_reduction.py's, so
their guarded divisions are torch's own. CPU tensors run the same kernels through Triton's interpreter.
"""

from __future__ import annotations

from typing import Any

import torch

from impls import torch_eager
from impls.torch_eager_reduction import reduce_rows, validate
from impls.torch_triton import compiled_count, log_probs_gradient, selected_row_sums

__all__ = ["compiled_count", "loss_reduction"]


class _RowSums(torch.autograd.Function):
    """(S_i, n_i): the rows' sums of selected losses in the accumulation dtype, and their counts (no gradient)."""

    @staticmethod
    def forward(ctx: Any, token_losses: torch.Tensor, mask_bytes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sums, counts = selected_row_sums(token_losses, mask_bytes)
        ctx.save_for_backward(mask_bytes)
        ctx.losses_dtype = token_losses.dtype
        ctx.mark_non_differentiable(counts)
        return sums, counts

    @staticmethod
    def backward(ctx: Any, grad_sums: torch.Tensor, _grad_counts: Any) -> tuple[Any, None]:
        (mask_bytes,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        return log_probs_gradient(grad_sums.contiguous(), mask_bytes, ctx.losses_dtype), None


def loss_reduction(token_losses: torch.Tensor, token_mask: torch.Tensor, *, mode: str = "token-mean",
                   rows: str | None = None, l_max: float | None = None) -> torch.Tensor:
    """The scalar loss of `mode` (reference/reduction.py), as impls/torch_eager_reduction.loss_reduction."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    sums, counts = _RowSums.apply(token_losses, token_mask.view(torch.uint8))
    if token_losses.shape[-1] >= torch_eager.EXACT_FLOAT32_COUNT:
        counts = counts.to(torch.float64)
    loss = reduce_rows(sums, counts, str(declared["mode"]), str(declared["rows"]), declared["l_max"])
    return loss.to(sums.dtype)
