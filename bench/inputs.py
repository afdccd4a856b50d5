"""Benchmark inputs: one fixed-seed Case per (size, dtype), and its exact reference, built once and reused.

Values are realistic and never zero: log-probs in [-10, -0.05], advantages of either sign with magnitude
in [0.25, 2], a mask of density about 0.7, and -inf in some masked-out positions (padding often holds
it), so a formulation that multiplies by the mask returns NaN and fails the check before it is timed.
"""

from __future__ import annotations

import functools

import numpy as np

from impls.case import Case
from impls.dtypes import round_to
from reference import OUTPUT_KEYS, Expected, reference
from reference.tolerance import STRICT, error_ratio, tolerance

SEED = 20240605
MASK_DENSITY = 0.7
MASKED_INF_FRACTION = 0.01


@functools.lru_cache(maxsize=1)  # tests run size by size, dtype by dtype: one live case bounds memory
def make_case(batch: int, tokens: int, dtype: str) -> Case:
    rng = np.random.default_rng([SEED, batch, tokens])
    log_probs = round_to(rng.uniform(-10.0, -0.05, size=(batch, tokens)), dtype)
    signs = np.where(rng.random(batch) < 0.5, -1.0, 1.0)
    advantages = round_to(signs * rng.uniform(0.25, 2.0, size=batch), dtype)
    mask = rng.random((batch, tokens)) < MASK_DENSITY
    poisoned = ~mask & (rng.random((batch, tokens)) < MASKED_INF_FRACTION / (1 - MASK_DENSITY))
    log_probs[poisoned] = -np.inf
    assert np.all(log_probs != 0) and np.all(advantages != 0)
    return Case(log_probs, advantages, mask, dtype=dtype)


@functools.lru_cache(maxsize=1)
def expected_for(batch: int, tokens: int, dtype: str) -> Expected:
    case = make_case(batch, tokens, dtype)
    return reference(case.token_log_probs, case.advantages, case.token_mask)


def worst_error(outputs: dict[str, np.ndarray], batch: int, tokens: int, dtype: str) -> dict[str, float]:
    """err/tol per output under the fuzzer's tolerance model, held to the built-ins' strict promise (<= 1 passes)."""
    expected = expected_for(batch, tokens, dtype)
    tol = tolerance(expected, dtype, STRICT).as_dict()
    want = expected.outputs()
    return {key: float(np.max(error_ratio(outputs[key], want[key], tol[key]), initial=0.0)) for key in OUTPUT_KEYS}
