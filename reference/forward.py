"""The float64 ground truth for the forward pass.

Inputs of any supported dtype are taken at their exact values (every float16, bfloat16 and float32 value
is exactly a float64). Each row's sum of selected log-probs is computed with `math.fsum`, which returns
the correctly rounded float64 of the exact sum, so the result carries at most one float64 rounding per
operation after that (multiply by A_i, divide by n_i): a relative error of at most 2**-52 for the vectors
and 2**-50 for the ratio, far below the error any implementation is allowed (see reference/tolerance.py).
A plain float64 sum would carry the very error it is meant to judge in float64 implementations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from impls.dtypes import DTYPE_NAMES, dtype_name, numpy_dtype

OUTPUT_KEYS: tuple[str, ...] = ("sequence_summed", "token_averaged", "magnitude_ratio")


@dataclass(frozen=True)
class Expected:
    """Exact results in float64, and the magnitudes the tolerance model needs."""

    sequence_summed: np.ndarray  # (batch,)
    token_averaged: np.ndarray  # (batch,)
    magnitude_ratio: np.ndarray  # ()
    advantages: np.ndarray  # (batch,) A_i: the error model scales underflow and gradients with it
    selected_counts: np.ndarray  # (batch,) int64, n_i
    selected_sums: np.ndarray  # (batch,) sum_t m_it l_it, correctly rounded
    absolute_row_sums: np.ndarray  # (batch,) sum_t m_it |A_i l_it|: the scale of the summation error
    numerator: float  # N = sum_i |sequence_summed_i|
    denominator: float  # D = sum_i |token_averaged_i|

    def outputs(self) -> dict[str, np.ndarray]:
        return {key: getattr(self, key) for key in OUTPUT_KEYS}

    def rounded(self, dtype: str) -> dict[str, np.ndarray]:
        """The exact results rounded once to `dtype` (a name from impls.dtypes.DTYPE_NAMES)."""
        return {key: value.astype(numpy_dtype(dtype)) for key, value in self.outputs().items()}


def _exact_float64(name: str, array: object, ndim: int) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(array).__name__}")
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {array.shape}")
    if dtype_name(array.dtype) not in DTYPE_NAMES:
        raise TypeError(f"{name} must have one of the dtypes {', '.join(DTYPE_NAMES)}, got {array.dtype}")
    return array.astype(np.float64)


def reference(token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray) -> Expected:
    """Exact float64 results for NumPy inputs of any supported dtype (masked positions may hold inf/NaN)."""
    log_probs = _exact_float64("token_log_probs", token_log_probs, 2)
    adv = _exact_float64("advantages", advantages, 1)
    batch, tokens = log_probs.shape
    if adv.shape != (batch,):
        raise ValueError(f"advantages must have shape ({batch},), got {adv.shape}")
    if not isinstance(token_mask, np.ndarray) or token_mask.dtype != np.bool_:
        got = getattr(token_mask, "dtype", type(token_mask).__name__)
        raise TypeError(f"token_mask must be a bool numpy.ndarray of shape {(batch, tokens)}, got {got}")
    if token_mask.shape != (batch, tokens):
        raise ValueError(f"token_mask must have shape {(batch, tokens)}, got {token_mask.shape}")
    if not np.isfinite(adv).all():
        raise ValueError("advantages must be finite")
    if not np.isfinite(log_probs[token_mask]).all():
        raise ValueError("token_log_probs must be finite wherever token_mask is true")

    counts = token_mask.sum(axis=1, dtype=np.int64)
    sums = np.array([math.fsum(row[keep]) for row, keep in zip(log_probs, token_mask)], dtype=np.float64)
    sums = sums.reshape(batch)
    summed = adv * sums
    averaged = np.where(counts > 0, summed / np.maximum(counts, 1), 0.0)
    summed = np.where(counts > 0, summed, 0.0)  # exactly +0.0, not -0.0, for empty rows
    abs_row_sums = np.abs(adv) * np.abs(np.where(token_mask, log_probs, 0.0)).sum(axis=1)
    numerator = math.fsum(np.abs(summed))
    denominator = math.fsum(np.abs(averaged))
    ratio = numerator / denominator if denominator > 0 else 0.0
    return Expected(
        sequence_summed=summed,
        token_averaged=averaged,
        magnitude_ratio=np.array(ratio, dtype=np.float64),
        advantages=adv,
        selected_counts=counts,
        selected_sums=sums,
        absolute_row_sums=abs_row_sums,
        numerator=numerator,
        denominator=denominator,
    )
