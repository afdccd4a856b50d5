"""The canonical PyTorch loss reduction: the one to copy into a trainer.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`token_losses` (batch, tokens) float16/bfloat16/float32/float64 is the per-token loss (advantage folded in),
`token_mask` (batch, tokens) bool; any strides, on one device. The loss is a 0-d tensor: float32 for half
inputs, else the input dtype. The modes (reference/reduction.py has them exactly): token-mean (sum / N),
seq-mean-token-mean (the mean over D rows of each row's mean), seq-mean-token-sum-norm (sum / (D L_max)),
seq-mean-token-sum (sum / D), token-sum; D is every row (rows="all", the book's 1/B) or the rows with a
selected token (rows="nonempty").

Every choice here answers a bug that trainers have shipped:
- one pass reads each row's losses and mask once for its sum and count (impls/torch_eager.py's, chunked on
  CPU): the sum selects (`where`, or the mask's 0/1 and `nansum` of exactly the NaNs 0 * inf makes), never a
  plain product, so -inf or NaN padding at a masked position never reaches the loss (verl #6349);
- counts are exact (integers, or float32 below 2^24 tokens): a count rounded in bfloat16 sticks at 256;
- N and D are counted from the mask, never from the shape: the padded width is not a length (verl #4360);
  L_max is the declared constant, never `token_mask.shape[-1]`;
- every divisor is made safe before dividing (clamped to 1): an all-masked batch gives exactly 0, not 0/0
  (unsloth-zoo #1286), and the loss is still computed from `token_losses`, so it stays connected to the graph
  and its gradient exists (exactly 0): a fresh `torch.tensor(0.0)` for an empty batch cuts the graph, and a
  distributed backward waits forever for it (ROLL 3a7b01f9);
- sums accumulate in float32 for half inputs and the loss stays in float32: no `+ 1e-8` in a denominator
  (in float64 it is a visible bias), no `.item()`, no Python branch on values, no host-device sync.
"""

from __future__ import annotations

import torch

from impls.torch_eager import EXACT_FLOAT32_COUNT, selected_sums_and_counts
from impls.validation import ArrayInfo, validate_inputs
from reference.reduction import CONTRACT as REDUCTION


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, torch.Tensor):
        return None
    device = "cpu" if value.device.type == "cpu" else str(value.device)
    return ArrayInfo(tuple(value.shape), str(value.dtype).removeprefix("torch."), device)


def validate(token_losses: torch.Tensor, token_mask: torch.Tensor, mode: str, rows: str,
             l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only) and the declared parameters as the contract reads them (aliases
    resolved; ValueError naming a wrong one)."""
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind="torch.Tensor")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


def row_sums_and_counts(token_losses: torch.Tensor, token_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's sum of selected losses (float32 for half inputs) and its count of selected tokens, one pass."""
    accumulate = torch.promote_types(token_losses.dtype, torch.float32)
    if token_losses.device.type != "cpu":  # a GPU runs each op at memory speed
        return (torch.where(token_mask, token_losses, 0).sum(dim=-1, dtype=accumulate),
                token_mask.sum(dim=-1, dtype=accumulate if token_losses.shape[-1] < EXACT_FLOAT32_COUNT else None))
    return selected_sums_and_counts(token_losses, token_mask, accumulate)


def reduce_rows(sums: torch.Tensor, counts: torch.Tensor, mode: str, rows: str, l_max: float | None) -> torch.Tensor:
    """The loss of a mode from the rows' sums (in the accumulation dtype) and their exact counts. N and D are
    counted in float64 (exact to 2^53 tokens, where a float32 sum of counts would round past 2^24), and each
    divisor is clamped to 1 before it divides."""
    exact = counts.to(torch.float64)
    if mode == "token-sum":
        return sums.sum()
    if mode == "token-mean":
        return sums.sum() / exact.sum().clamp(min=1)  # N = 0: every sum is 0, and 0 / 1 = 0
    divisor = (torch.ones_like(exact) if rows == "all" else (exact > 0).to(exact.dtype)).sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        return (sums / counts.to(sums.dtype).clamp(min=1)).sum() / divisor  # an empty row's mean: 0 / 1 = 0
    if mode == "seq-mean-token-sum":
        return sums.sum() / divisor
    return sums.sum() / (divisor * l_max)  # seq-mean-token-sum-norm: the declared L_max, never the width


def loss_reduction(token_losses: torch.Tensor, token_mask: torch.Tensor, *, mode: str = "token-mean",
                   rows: str = "all", l_max: float | None = None) -> torch.Tensor:
    """The scalar loss of `mode` (reference/reduction.py); see the module docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    sums, counts = row_sums_and_counts(token_losses, token_mask)
    loss = reduce_rows(sums, counts, str(declared["mode"]), str(declared["rows"]), declared["l_max"])
    return loss.to(sums.dtype)
