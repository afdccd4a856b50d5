"""The canonical NumPy loss reduction: float16, ml_dtypes.bfloat16, float32 and float64, any strides.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`token_losses` (batch, tokens) is the per-token loss (advantage folded in), `token_mask` (batch, tokens) bool;
any strides, negative and zero ones included. The loss is a 0-d array: float32 for half inputs, else the
input dtype. The modes (reference/reduction.py has them exactly): token-mean (sum / N), seq-mean-token-mean
(the mean over D rows of each row's mean), seq-mean-token-sum-norm (sum / (D L_max)), seq-mean-token-sum
(sum / D), token-sum; D is every row (rows="all", the book's 1/B) or the rows with a selected token
(rows="nonempty"). No autograd: NumPy has none.

The same choices as impls/torch_eager_reduction.py, each for the bug it prevents:
- the row pass is impls/numpy_impl.py's: cache-sized row blocks over threads, selection by a bitwise AND
  with the mask widened to whole words, so unselected values become +0.0 whatever they held: -inf or NaN
  padding never reaches the loss (verl #6349), and no 0 * inf makes a NaN; half inputs are summed with an
  explicit float32 accumulator, since NumPy sums a bfloat16 array in bfloat16 (a running sum sticks at 256);
- counts are integers, exact: N and D are counted from the mask, never from the shape (the padded width is
  not a length, verl #4360), N in int64; L_max is the declared constant, never `token_mask.shape[-1]`;
- after the row pass only the batch's B row sums are left: they are widened to float64 (B values: free), so
  the batch sum, the per-row means and the division by an exact N or D round in float64, and the loss is
  rounded once, to float32 for half inputs (trainers keep their loss there) or to the input dtype;
- every divisor is clamped to 1 before dividing: an all-masked batch gives exactly 0, not 0/0 with a
  RuntimeWarning (unsloth-zoo #1286); no `+ 1e-8` in a denominator (in float64 it is a visible bias).
"""

from __future__ import annotations

import numpy as np

from impls.numpy_impl import _describe, _selected_sums
from impls.validation import validate_inputs
from reference.reduction import CONTRACT as REDUCTION


def validate(token_losses: np.ndarray, token_mask: np.ndarray, mode: str, rows: str,
             l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only) and the declared parameters as the contract reads them (aliases
    resolved; ValueError naming a wrong one)."""
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind="numpy.ndarray", noun="array")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


def reduce_rows(sums: np.ndarray, counts: np.ndarray, mode: str, rows: str, l_max: float | None) -> np.float64:
    """The loss of a mode in float64 from the rows' sums and their exact integer counts, each divisor clamped
    to 1 before it divides."""
    wide = sums.astype(np.float64)
    if mode == "token-sum":
        return wide.sum()
    if mode == "token-mean":
        tokens = np.int64(counts.sum(dtype=np.int64))
        return wide.sum() / np.float64(max(tokens, 1))  # N = 0: every sum is 0, and 0 / 1 = 0
    divisor = np.float64(max(len(counts) if rows == "all" else np.count_nonzero(counts), 1))
    if mode == "seq-mean-token-mean":
        return (wide / np.maximum(counts, 1)).sum() / divisor  # an empty row's mean: 0 / 1 = 0
    if mode == "seq-mean-token-sum":
        return wide.sum() / divisor
    return wide.sum() / (divisor * l_max)  # seq-mean-token-sum-norm: the declared L_max, never the width


def loss_reduction(token_losses: np.ndarray, token_mask: np.ndarray, *, mode: str = "token-mean",
                   rows: str = "all", l_max: float | None = None) -> np.ndarray:
    """The scalar loss of `mode` (reference/reduction.py) as a 0-d array; see the module docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    accumulate = np.float64 if token_losses.dtype == np.float64 else np.float32
    sums, counts = _selected_sums(token_losses, token_mask, accumulate)
    loss = reduce_rows(sums, counts, str(declared["mode"]), str(declared["rows"]), declared["l_max"])
    return np.asarray(loss, dtype=accumulate).reshape(())
