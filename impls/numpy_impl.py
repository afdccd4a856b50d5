"""The canonical formulation in NumPy: float16, ml_dtypes.bfloat16, float32 and float64.

NumPy sums a bfloat16 array in bfloat16 (5000 values in [-1, 0) sum to -256), so half inputs are summed
with an explicit float32 accumulator. Negative and zero strides are fine: nothing here assumes a layout.
"""

from __future__ import annotations

import numpy as np

from impls.dtypes import dtype_name
from impls.validation import ArrayInfo, validate_inputs


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, np.ndarray):
        return None
    return ArrayInfo(value.shape, dtype_name(value.dtype), "cpu")


def normalize(
    token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray
) -> dict[str, np.ndarray]:
    out_dtype = token_log_probs.dtype
    accumulate = np.float64 if out_dtype == np.float64 else np.float32
    zero = np.zeros((), dtype=out_dtype)
    selected_sums = np.where(token_mask, token_log_probs, zero).sum(axis=-1, dtype=accumulate)
    counts = np.count_nonzero(token_mask, axis=-1)
    sequence_summed = advantages.astype(accumulate) * selected_sums
    token_averaged = sequence_summed / np.maximum(counts, 1).astype(accumulate)
    numerator = np.abs(sequence_summed).sum()
    denominator = np.abs(token_averaged).sum()
    magnitude_ratio = numerator / denominator if denominator > 0 else accumulate(0)
    return {
        "sequence_summed": sequence_summed.astype(out_dtype),
        "token_averaged": token_averaged.astype(out_dtype),
        "magnitude_ratio": np.asarray(magnitude_ratio, dtype=out_dtype).reshape(()),
    }


def sequence_vs_token_normalization(
    token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray
) -> dict[str, np.ndarray]:
    validate_inputs(
        token_log_probs, advantages, token_mask, describe=_describe, kind="numpy.ndarray", noun="array"
    )
    return normalize(token_log_probs, advantages, token_mask)
