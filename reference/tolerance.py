"""The one tolerance model: worst-case floating-point error bounds, and the two precisions they come in.

Each contract (reference/<contract>.py) derives its outputs' and gradients' tolerances from these parts
(the derivations are in docs/tolerance.md), in one of two precisions:

- CONTRACT, what any correct implementation may do: accumulations (sums over tokens, counts, sums over the
  batch) carry at least float32; every elementwise step (products, divisions, casts, each elementwise step
  of the backward) may round in the input dtype, up to a counted number of times per output: the counts of
  the plain formulations, each contract's own. Every bound is a worst case, so correct code passes at any
  budget. This is what `check` holds a user's function to.
- STRICT, the built-ins' promise: accumulate in at least float32 and round once to the output dtype (one
  rounding per output, SAFETY = 2 admitting a second). A test holds every built-in to it.

Notation: u is the unit roundoff of a dtype, gamma(k, u) = k u / (1 - k u) the bound on k chained roundings
(Higham, Accuracy and Stability of Numerical Algorithms, ch. 3). Overflow is not rounding: `overflows` tells
whether an exact magnitude lies beyond a dtype's range, so a non-finite value there is reported as what it
is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from reference.dtypes import largest, smallest_subnormal, unit_roundoff

SAFETY = 2.0  # the strict model's factor: admits a second rounding to the output dtype
# The exact forwards own error: fsum per row, then one float64 rounding per operation (reference/magnitude.py).
REFERENCE_VECTOR_ERROR = 2.0**-51
REFERENCE_RATIO_ERROR = 2.0**-49


@dataclass(frozen=True)
class Precision:
    """What an implementation is held to: the contract's counted roundings in the input dtype, or (strict) the
    built-ins' promise of one rounding per output. The counts are each contract's (reference/<contract>.py)."""

    name: str
    strict: bool = False


CONTRACT = Precision("contract")
STRICT = Precision("strict", strict=True)
PRECISIONS: dict[str, Precision] = {p.name: p for p in (CONTRACT, STRICT)}


def gamma(k: np.ndarray | float, u: float) -> np.ndarray:
    ku = np.asarray(k, dtype=np.float64) * u
    with np.errstate(over="ignore", divide="ignore"):
        return np.where(ku < 1, ku / np.maximum(1 - ku, np.finfo(np.float64).tiny), np.inf)


def error_ratio(got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """|got - want| / tol element-wise: <= 1 passes. 0/0 is 0; any error against a zero tolerance is inf."""
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(np.asarray(got, dtype=np.float64) - want)
        ratio = np.where(err == 0, 0.0, err / tol)
    return np.where(np.isnan(ratio), np.inf, ratio)


def ulp_error(got: np.ndarray, want: np.ndarray, dtype: str, scale: np.ndarray | float = 0.0) -> np.ndarray:
    """|got - want| in units in the last place of `dtype` at the exact value `want`, or at `scale` where that
    is larger (inf if not finite).

    A result rounded once from the exact value is within 0.5 ulp; the figure shows how much more an
    implementation loses, whether or not it conforms. `scale` is the magnitude the computation works at
    (the terms a sum or a gradient is made of): where those cancel to a tiny or zero exact value, ulps of
    the exact value would only measure the cancellation."""
    want = np.asarray(want, dtype=np.float64)
    bits = _significand_bits(dtype)
    _, exponent = np.frexp(np.maximum(np.abs(want), scale))  # |want| = m 2**e, 0.5 <= m < 1
    ulp = np.maximum(np.ldexp(1.0, exponent - bits), smallest_subnormal(dtype))
    with np.errstate(invalid="ignore"):
        err = np.abs(np.asarray(got, dtype=np.float64) - want) / ulp
    return np.where(np.isfinite(err), err, np.inf)


@functools.cache
def _significand_bits(dtype: str) -> int:
    return -int(np.round(np.log2(unit_roundoff(dtype))))  # u = 2**-p


def overflows(magnitude: float, dtype: str, roundings: int = 1) -> bool:
    """Whether a value of this exact magnitude, rounded `roundings` times on the way, can exceed `dtype`'s range
    (then inf there is the dtype's limit, not a rounding error)."""
    return magnitude * (1 + float(gamma(roundings, unit_roundoff(dtype)))) >= largest(dtype)
