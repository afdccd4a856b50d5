"""The canonical loss reduction written once against the Array API standard: the porting story in one module.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`array_api_compat.array_namespace(...)` returns the standard's namespace for whatever arrays come in
(array_api_strict, NumPy, PyTorch, JAX, CuPy, ...), and every line below uses only functions the standard defines
(`where`, `sum(..., dtype=, keepdims=)`, `count_nonzero`, `astype`, `asarray`, `zeros`, `ones_like`, `reshape`),
never a method or a library's own extension: the fuzzer runs it on array_api_strict (which refuses anything
outside the standard), and the same function runs on NumPy, torch and JAX arrays, differentiable wherever the
library is (torch autograd, jax.grad). The loss is a 0-d array on the input's device: float32 for half inputs,
else the input dtype. The modes (reference/reduction.py has them exactly): token-mean (sum / N),
seq-mean-token-mean (the mean over D rows of each row's mean), seq-mean-token-sum-norm (sum / (D L_max)),
seq-mean-token-sum (sum / D), token-sum; D is every row (rows="all", the book's 1/B) or the rows with a selected
token (rows="nonempty"; rows=None, the default: every row, or the convention of the trainer whose name `mode` is
spelled with, reference/reduction.py's TRAINER_CONVENTIONS).

Why each line is the way it is (as in impls/torch_eager_reduction.py):
- selection with `where`, never a product with the mask: masked positions may hold -inf or NaN, and
  0 * -inf is NaN (verl #6349); `where` picks zeros there whatever they held, and its derivative is exactly
  0 there;
- sums accumulate in float32 for half inputs (float16, bfloat16, where the namespace has them) through
  `sum(..., dtype=float32)`, else in the input dtype, and the loss stays there: a bfloat16 running sum sticks
  at 256, and trainers keep their loss in float32;
- counts are integers, exact: N and D are counted from the mask, never from the shape (the padded width is
  not a length, verl #4360), each converted to the accumulator once; L_max is the declared constant, never
  `token_mask.shape[-1]`. They come from `count_nonzero` (2023.12), which reads the mask as it is, and only
  those the mode reads: N alone for token-mean, a count per row where a row's mean or D = B+ needs it. A
  namespace older than 2023.12 sums the mask widened to integers instead (int64 where the batch could hold
  2^31 tokens, int32 otherwise, which keeps JAX without x64 free of warnings);
- every divisor is made safe before dividing (a `where` puts 1 in place of a zero count): an all-masked
  batch gives exactly 0, not 0/0 (unsloth-zoo #1286), and no division ever forms a NaN that a later `where`
  would discard from the forward pass but not from the backward; the loss is still computed from
  `token_losses`, so its gradient exists and is exactly 0;
- no `+ 1e-8` in a denominator, no conversion to a Python number, no branch on values.
"""

from __future__ import annotations

from typing import Any

# At module level: the registry imports this module only when the implementation is asked for, and a machine
# without array_api_compat then lists it as unavailable with the reason instead of failing on the first call.
import array_api_compat

from impls.array_api_impl import HALF_NAMES, KIND, _describe, _dtype_name
from impls.validation import validate_inputs
from reference.reduction import CONTRACT as REDUCTION


def _same_library(token_losses: Any, token_mask: Any) -> None:
    """Mixing libraries (a NumPy mask with torch losses) has no common namespace: name the odd argument. A
    non-array is left to validate_inputs, which names it."""
    if not (array_api_compat.is_array_api_obj(token_losses) and array_api_compat.is_array_api_obj(token_mask)):
        return
    xp = array_api_compat.array_namespace(token_losses)
    if array_api_compat.array_namespace(token_mask) is not xp:
        raise TypeError(f"token_mask must be an array of the library of token_losses ({xp.__name__}), "
                        f"got {type(token_mask).__module__}.{type(token_mask).__qualname__}")


def validate(token_losses: Any, token_mask: Any, mode: str, rows: str | None, l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only) and the declared parameters as the contract reads them (aliases
    resolved; ValueError naming a wrong one)."""
    _same_library(token_losses, token_mask)
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind=KIND, noun="array")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


def _at_least_one(xp: Any, count: Any) -> Any:
    """A count with 0 replaced by 1 (the standard's `where`, as old namespaces have no `maximum`)."""
    return xp.where(count > 0, count, xp.ones_like(count))


def _counts(xp: Any, token_mask: Any, axis: int | None) -> Any:
    """The selected tokens of each row (axis=-1), or of the batch as a shape-(1,) array (axis=None): exact
    integers, from `count_nonzero` where the namespace has it (2023.12), else from the mask's integer sum."""
    batch, tokens = token_mask.shape
    if hasattr(xp, "count_nonzero"):
        counted = xp.count_nonzero(token_mask, axis=axis, keepdims=axis is None)
        return counted if axis is not None else xp.reshape(counted, (1,))
    row_count = xp.int32 if tokens < 2**31 else xp.int64  # one row's count
    total_count = xp.int32 if batch * tokens < 2**31 else xp.int64  # N: the whole batch's
    counts = xp.sum(xp.astype(token_mask, row_count), axis=-1, dtype=row_count)  # n_i
    return counts if axis is not None else xp.sum(counts, dtype=total_count, keepdims=True)


def loss_reduction(token_losses: Any, token_mask: Any, *, mode: str = "token-mean", rows: str | None = None,
                   l_max: float | None = None) -> Any:
    """The scalar loss of `mode` (reference/reduction.py) for arrays of any Array API library; see the module
    docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    mode, rows, l_max = str(declared["mode"]), str(declared["rows"]), declared["l_max"]
    xp = array_api_compat.array_namespace(token_losses, token_mask)
    device = array_api_compat.device(token_losses)
    accumulate = xp.float32 if _dtype_name(token_losses.dtype) in HALF_NAMES else token_losses.dtype
    batch = token_losses.shape[0]

    zero = xp.zeros((), dtype=token_losses.dtype, device=device)
    selected = xp.where(token_mask, token_losses, zero)  # select, never multiply: -inf/NaN padding stays out
    sums = xp.sum(selected, axis=-1, dtype=accumulate)  # S_i, float32 accumulator for half inputs

    # Batch totals keep their axis (shape (1,)): NumPy reduces a whole array to a NumPy scalar, not an array, and
    # `reshape` of a 1-element array gives the 0-d array the contract returns in every library.
    total = xp.sum(sums, keepdims=True)  # T
    if mode == "token-sum":
        loss = total
    elif mode == "token-mean":
        tokens_selected = _counts(xp, token_mask, None)  # N = 0: T is 0, and 0 / 1 = 0
        loss = total / xp.astype(_at_least_one(xp, tokens_selected), accumulate)
    else:
        counts = _counts(xp, token_mask, -1) if mode == "seq-mean-token-mean" or rows == "nonempty" else None
        if rows == "all":
            divisor = xp.asarray(max(batch, 1), dtype=accumulate, device=device)  # B: known from the shape
        else:
            nonempty = xp.sum(xp.astype(counts > 0, counts.dtype), dtype=counts.dtype, keepdims=True)  # B+
            divisor = xp.astype(_at_least_one(xp, nonempty), accumulate)
        if mode == "seq-mean-token-mean":
            means = sums / xp.astype(_at_least_one(xp, counts), accumulate)  # an empty row's mean: 0 / 1 = 0
            loss = xp.sum(means, keepdims=True) / divisor
        elif mode == "seq-mean-token-sum":
            loss = total / divisor
        else:  # seq-mean-token-sum-norm: the declared L_max, never the width
            loss = total / (divisor * l_max)
    return xp.reshape(loss, ())
