"""Benchmark inputs: one fixed-seed Case per (contract, size, dtype), and its exact results, built once and reused.

Values are realistic and never zero: per-token values in [-10, -0.05] (log-probs, or losses), per-row values of
either sign with magnitude in [0.25, 2] (an advantage per row), a mask of density about 0.7, and -inf in some masked-out
positions (padding often holds it), so a formulation that multiplies by the mask returns NaN and fails the
check before it is timed.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from reference.case import Case
from reference.contract import Contract
from reference.dtypes import round_to
from reference.exact import exact_results
from reference.tolerance import STRICT, Precision, error_ratio

SEED = 20240605
MASK_DENSITY = 0.7
MASKED_INF_FRACTION = 0.01


@functools.lru_cache(maxsize=1)  # tests run size by size, dtype by dtype: one live case bounds memory
def make_case(contract: Contract, batch: int, tokens: int, dtype: str, masked_values: str = "any") -> Case:
    """`masked_values="finite"`: no -inf at masked-out positions, for a user's function declared to need finite
    padding (as `check --masked-values finite` declares it)."""
    rng = np.random.default_rng([SEED, batch, tokens])
    sizes = {"batch": batch, "tokens": tokens}
    mask = rng.random((batch, tokens)) < MASK_DENSITY
    poisoned = ~mask & (rng.random((batch, tokens)) < MASKED_INF_FRACTION / (1 - MASK_DENSITY))
    if masked_values == "finite":
        poisoned[:] = False
    values: dict[str, Any] = {}
    for spec in contract.inputs:
        shape = tuple(sizes[dim] for dim in spec.dims)
        if spec.kind == "bool":
            values[spec.name] = mask
        elif spec.role == "tokens":
            values[spec.name] = np.where(poisoned, -np.inf, round_to(rng.uniform(-10.0, -0.05, size=shape), dtype))
        else:
            signs = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
            values[spec.name] = round_to(signs * rng.uniform(0.25, 2.0, size=shape), dtype)
    assert all(np.all(value != 0) for value in values.values() if value.dtype != bool)
    return Case(contract=contract, dtype=dtype, **values)


def worst_error(outputs: dict[str, np.ndarray], case: Case, precision: Precision = STRICT) -> dict[str, float]:
    """err/tol per output under the fuzzer's tolerance model (<= 1 passes), held to `precision`: the built-ins' strict
    promise, or a user's function to the contract."""
    expected = exact_results(case)
    tol = case.contract.tolerance(expected, case.dtype, precision)
    want = expected.outputs()
    return {key: float(np.max(error_ratio(outputs[key], want[key], tol[key]), initial=0.0)) for key in want}
