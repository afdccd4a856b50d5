"""Facts about the four supported dtypes, by name, shared by every framework and by the tolerance model."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

DTYPE_NAMES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES: frozenset[str] = frozenset({"float16", "bfloat16"})

_NUMPY_DTYPES = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype for a dtype name (bfloat16 comes from ml_dtypes)."""
    return _NUMPY_DTYPES[name]


def dtype_name(dtype: object) -> str:
    """The name of a NumPy, ml_dtypes, torch or JAX dtype: 'float32', 'bfloat16', 'bool', ..."""
    return str(dtype).removeprefix("torch.")


def accumulation_dtype(name: str) -> str:
    """Half inputs accumulate in float32; float32 and float64 in themselves."""
    return "float32" if name in HALF_DTYPES else name


@functools.cache  # a fact of the name: the judge asks for it on every comparison
def unit_roundoff(name: str) -> float:
    """u = 2**-p for a p-bit significand: the largest relative error of one rounding to nearest."""
    return float(ml_dtypes.finfo(numpy_dtype(name)).eps) / 2


@functools.cache  # a fact of the name: the judge asks for it on every comparison
def smallest_subnormal(name: str) -> float:
    """The absolute error floor of one rounding where results underflow."""
    return float(ml_dtypes.finfo(numpy_dtype(name)).smallest_subnormal)


@functools.cache  # a fact of the name: the judge asks for it on every comparison
def smallest_normal(name: str) -> float:
    return float(ml_dtypes.finfo(numpy_dtype(name)).tiny)


@functools.cache  # a fact of the name: the judge asks for it on every comparison
def largest(name: str) -> float:
    return float(ml_dtypes.finfo(numpy_dtype(name)).max)


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """Round float64 values to the named dtype and back to float64 (round to nearest even)."""
    return np.asarray(values, dtype=np.float64).astype(numpy_dtype(name)).astype(np.float64)
