"""The canonical formulation written once against the Array API standard: the porting story in one module.

`array_api_compat.array_namespace(...)` returns the standard's namespace for whatever arrays come in
(array_api_strict, NumPy, PyTorch, JAX, CuPy, Dask, ...), and every line below uses only functions the
standard defines (`where`, `sum(..., dtype=)`, `astype`, `abs`, `zeros`, `ones_like`), never a method or a
library's own extension. So this one function is the implementation for every array library that follows
the standard: the fuzzer runs it on array_api_strict (which refuses anything outside the standard), and
tests/test_array_api.py runs the very same function on NumPy, torch and JAX arrays too.

Why each line is the way it is (as in impls/torch_eager.py):
- Selection with `where`, never a product with the mask: masked positions may hold -inf or NaN, and
  0 * -inf is NaN. `where` picks zeros there whatever they held.
- Sums accumulate in float32 for half inputs (float16, bfloat16, where the namespace has them) through
  `sum(..., dtype=float32)`, and in the input dtype otherwise: a bfloat16 running sum sticks at 256.
- Counts are integer sums of the mask, exact at any length, converted to the accumulator once.
- Divisors are made safe before dividing (a fully masked row divides 0 by 1, a zero ratio denominator
  divides by 1): no division ever produces NaN or inf, not even one a later `where` would discard.
- One rounding to the output dtype at the end, with `astype`.
"""

from __future__ import annotations

from typing import Any

# At module level: the registry imports this module only when the implementation is asked for, and a machine
# without array_api_compat then lists it as unavailable with the reason instead of failing on the first call.
import array_api_compat

from impls.validation import ArrayInfo, validate_inputs
from reference.magnitude import CONTRACT as MAGNITUDE

# What the error messages call an acceptable input: any array of a library that follows the standard.
KIND = "array_api_strict.Array or any other Array API array"
HALF_NAMES = ("float16", "bfloat16")  # the dtypes that must not accumulate in themselves


def _dtype_name(dtype: Any) -> str:
    """'float32', 'bfloat16', 'bool', ... for any library's dtype: each prints as its name, some with the
    library's prefix ('torch.float32', 'array_api_strict.float32'); NumPy and JAX print the bare name."""
    return str(dtype).rsplit(".", 1)[-1]


def _describe(value: object) -> ArrayInfo | None:
    if not array_api_compat.is_array_api_obj(value) or not hasattr(value, "shape"):
        return None
    try:
        device = array_api_compat.device(value)
    except Exception:  # a value traced by jax.jit has no device yet
        device = None
    # under jax.grad a traced value's device is None: unknown, never the string "None" (the concrete mask's
    # device would then differ from it)
    return ArrayInfo(tuple(value.shape), _dtype_name(value.dtype), None if device is None else str(device))


def _same_library(token_log_probs: Any, advantages: Any, token_mask: Any) -> None:
    """Mixing libraries (a NumPy mask with torch log-probs) has no common namespace, and their devices cannot be
    compared: name the odd argument first. Non-arrays are left to validate_inputs, which names them."""
    if not array_api_compat.is_array_api_obj(token_log_probs):
        return
    xp = array_api_compat.array_namespace(token_log_probs)
    for name, value in (("advantages", advantages), ("token_mask", token_mask)):
        if array_api_compat.is_array_api_obj(value) and array_api_compat.array_namespace(value) is not xp:
            raise TypeError(f"{name} must be an array of the library of token_log_probs ({xp.__name__}), "
                            f"got {type(value).__module__}.{type(value).__qualname__}")


def sequence_vs_token_normalization(token_log_probs: Any, advantages: Any, token_mask: Any) -> dict[str, Any]:
    """The contract's three outputs for arrays of any Array API library, in its dtype, on its device."""
    _same_library(token_log_probs, advantages, token_mask)
    validate_inputs(MAGNITUDE, (token_log_probs, advantages, token_mask), describe=_describe, kind=KIND, noun="array")
    xp = array_api_compat.array_namespace(token_log_probs, advantages, token_mask)
    device = array_api_compat.device(token_log_probs)
    out_dtype = token_log_probs.dtype
    accumulate = xp.float32 if _dtype_name(out_dtype) in HALF_NAMES else out_dtype
    tokens = token_log_probs.shape[-1]
    count_dtype = xp.int32 if tokens < 2**31 else xp.int64  # int32 keeps JAX without x64 free of warnings

    zero = xp.zeros((), dtype=out_dtype, device=device)
    selected = xp.where(token_mask, token_log_probs, zero)  # select, never multiply: -inf/NaN padding stays out
    sums = xp.sum(selected, axis=-1, dtype=accumulate)  # float32 accumulator for half inputs
    counts = xp.sum(xp.astype(token_mask, count_dtype), axis=-1, dtype=count_dtype)  # exact at any length

    sequence_summed = xp.astype(advantages, accumulate) * sums
    # A fully masked row has sum 0: dividing it by 1 gives the contract's exact 0, and no 0/0 is ever formed.
    divisors = xp.astype(xp.where(counts > 0, counts, xp.ones_like(counts)), accumulate)
    token_averaged = sequence_summed / divisors

    numerator = xp.sum(xp.abs(sequence_summed))
    denominator = xp.sum(xp.abs(token_averaged))
    nonzero = denominator > 0
    safe_denominator = xp.where(nonzero, denominator, xp.ones_like(denominator))  # guard before dividing
    magnitude_ratio = xp.where(nonzero, numerator / safe_denominator, xp.zeros_like(numerator))
    return {
        "sequence_summed": xp.astype(sequence_summed, out_dtype),
        "token_averaged": xp.astype(token_averaged, out_dtype),
        "magnitude_ratio": xp.astype(magnitude_ratio, out_dtype),
    }
