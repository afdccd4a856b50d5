"""The tolerance model: tight enough to catch a 2**-12 relative bias, loose enough for every correct
formulation (any summation order, float64 upcast, a per-row loop, cumsum)."""

import ml_dtypes
import numpy as np
import pytest

from fuzz.tolerance import error_ratio, gamma, tolerance
from impls.dtypes import numpy_dtype, round_to
from reference import reference


def _inputs(seed, dtype, batch=16, tokens=200):
    rng = np.random.default_rng(seed)
    lp = round_to(-rng.exponential(1.0, (batch, tokens)), dtype)
    adv = round_to(rng.normal(size=batch), dtype)
    mask = rng.random((batch, tokens)) < 0.7
    mask[0] = False
    return lp, adv, mask


def _formulations(lp, adv, mask, dtype):
    """Correct ways to compute the vectors in the accumulation dtype, rounded to `dtype` at the end."""
    acc = np.float64 if dtype == "float64" else np.float32
    x = np.where(mask, lp, 0).astype(acc)
    a = adv.astype(acc)
    n = np.maximum(mask.sum(1), 1).astype(acc)
    sums = {
        "pairwise": x.sum(1),
        "reversed": x[:, ::-1].sum(1),
        "cumsum": np.cumsum(x, axis=1, dtype=acc)[:, -1],
        "per-row loop": np.array([sum(row.tolist(), acc(0)) if len(row) else acc(0) for row in x], dtype=acc),
        "einsum of products": np.einsum("bt,b->b", x, a) / np.where(a == 0, 1, a),
        "float64 upcast": np.where(mask, lp, 0).astype(np.float64).sum(1),
    }
    for name, s in sums.items():
        summed = (a * s.astype(acc)).astype(acc)
        if name == "einsum of products":
            summed = np.einsum("bt,b->b", x, a).astype(acc)
        averaged = summed / n
        denominator = np.abs(averaged).sum()
        ratio = np.abs(summed).sum() / denominator if denominator > 0 else acc(0)
        out = numpy_dtype(dtype)
        yield name, {"sequence_summed": summed.astype(out), "token_averaged": averaged.astype(out),
                     "magnitude_ratio": np.asarray(ratio).astype(out)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("seed", range(5))
def test_every_correct_formulation_is_accepted(dtype, seed):
    lp, adv, mask = _inputs(seed, dtype)
    expected = reference(lp, adv, mask)
    tol = tolerance(expected, dtype)
    for name, got in _formulations(lp, adv, mask, dtype):
        for key, want in expected.outputs().items():
            ratio = error_ratio(got[key].astype(np.float64), want, tol.as_dict()[key]).max(initial=0)
            assert ratio <= 1, (name, key, ratio)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_relative_bias_of_2_to_the_minus_12_is_caught(dtype):
    lp, adv, mask = _inputs(0, dtype, batch=8, tokens=64)
    expected = reference(lp, adv, mask)
    tol = tolerance(expected, dtype)
    for key, want in expected.outputs().items():
        biased = want * (1 + 2.0 ** -12)
        assert error_ratio(biased, want, tol.as_dict()[key]).max() > 1, key


def test_fully_masked_rows_and_zero_denominators_must_be_exactly_zero():
    expected = reference(np.array([[-1.0, -2.0]]), np.array([1.0]), np.zeros((1, 2), bool))
    tol = tolerance(expected, "float32")
    assert tol.sequence_summed.tolist() == [0.0] and float(tol.magnitude_ratio) == 0.0
    assert error_ratio(np.array([1e-30]), np.array([0.0]), tol.sequence_summed)[0] == np.inf
    assert error_ratio(np.array([0.0]), np.array([0.0]), tol.sequence_summed)[0] == 0.0
    assert error_ratio(np.array([np.nan]), np.array([0.0]), np.array([1.0]))[0] == np.inf


def test_half_running_sums_are_caught():
    rng = np.random.default_rng(0)
    lp = (-rng.random((1, 5000))).astype(ml_dtypes.bfloat16)
    mask = np.ones((1, 5000), bool)
    expected = reference(lp, np.ones(1, ml_dtypes.bfloat16), mask)
    running = lp.sum(axis=1)  # NumPy accumulates bfloat16 in bfloat16: about -256
    tol = tolerance(expected, "bfloat16")
    assert error_ratio(running.astype(np.float64), expected.sequence_summed, tol.sequence_summed)[0] > 1


def test_gamma():
    assert gamma(1, 2.0 ** -24) == pytest.approx(2.0 ** -24)
    assert gamma(10**9, 2.0 ** -8) == np.inf
