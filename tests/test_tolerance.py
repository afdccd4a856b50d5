"""The tolerance model: tight enough to catch a 2**-12 relative bias and half-precision running sums, loose
enough for every correct formulation (any summation order, float64 upcast, a per-row loop, cumsum, and under
the contract, elementwise steps rounded in the input dtype)."""

import ml_dtypes
import numpy as np
import pytest

from reference.dtypes import numpy_dtype, round_to
from reference.magnitude import reference, tolerance
from reference.tolerance import CONTRACT, STRICT, error_ratio, gamma, ulp_error


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
            ratio = error_ratio(got[key].astype(np.float64), want, tol[key]).max(initial=0)
            assert ratio <= 1, (name, key, ratio)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_relative_bias_of_2_to_the_minus_12_is_caught(dtype):
    lp, adv, mask = _inputs(0, dtype, batch=8, tokens=64)
    expected = reference(lp, adv, mask)
    tol = tolerance(expected, dtype)
    for key, want in expected.outputs().items():
        biased = want * (1 + 2.0 ** -12)
        assert error_ratio(biased, want, tol[key]).max() > 1, key


def test_fully_masked_rows_and_zero_denominators_must_be_exactly_zero():
    expected = reference(np.array([[-1.0, -2.0]]), np.array([1.0]), np.zeros((1, 2), bool))
    tol = tolerance(expected, "float32")
    assert tol["sequence_summed"].tolist() == [0.0] and float(tol["magnitude_ratio"]) == 0.0
    assert error_ratio(np.array([1e-30]), np.array([0.0]), tol["sequence_summed"])[0] == np.inf
    assert error_ratio(np.array([0.0]), np.array([0.0]), tol["sequence_summed"])[0] == 0.0
    assert error_ratio(np.array([np.nan]), np.array([0.0]), np.array([1.0]))[0] == np.inf


def test_half_running_sums_are_caught():
    rng = np.random.default_rng(0)
    lp = (-rng.random((1, 5000))).astype(ml_dtypes.bfloat16)
    mask = np.ones((1, 5000), bool)
    expected = reference(lp, np.ones(1, ml_dtypes.bfloat16), mask)
    running = lp.sum(axis=1)  # NumPy accumulates bfloat16 in bfloat16: about -256
    tol = tolerance(expected, "bfloat16")
    assert error_ratio(running.astype(np.float64), expected.sequence_summed, tol["sequence_summed"])[0] > 1


def test_gamma():
    assert gamma(1, 2.0 ** -24) == pytest.approx(2.0 ** -24)
    assert gamma(10**9, 2.0 ** -8) == np.inf


# --- The contract's precision: elementwise steps rounded in the input dtype (docs/tolerance.md) ---------

def _rounded_steps(lp, adv, mask, dtype, *, mean_first=False, per_token_product=False, manual_means=False):
    """Emulate code that keeps the input dtype: sums accumulate in float32 (float64 for float64) and are
    rounded to the dtype; every elementwise step rounds to the dtype."""
    acc = np.float64 if dtype == "float64" else np.float32

    def r(x):
        return round_to(np.asarray(x, dtype=np.float64), dtype)

    selected = np.where(mask, lp, 0.0)
    if per_token_product:
        row_sum = None
        summed = r((r(adv[:, None] * selected)).astype(acc).sum(1, dtype=acc))
    else:
        row_sum = r(selected.astype(acc).sum(1, dtype=acc))
        summed = r(adv * row_sum)
    count = r(np.maximum(mask.sum(1), 1))
    averaged = r(adv * r(row_sum / count)) if mean_first and row_sum is not None else r(summed / count)
    numerator = r(np.abs(summed).astype(acc).sum(dtype=acc))
    denominator = r(np.abs(averaged).astype(acc).sum(dtype=acc))
    if manual_means:
        numerator, denominator = r(numerator / len(lp)), r(denominator / len(lp))
    ratio = r(numerator / denominator) if denominator > 0 else np.float64(0.0)
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": np.asarray(ratio)}


VARIANTS = {
    "plain": {}, "mean first": {"mean_first": True}, "per-token product": {"per_token_product": True},
    "hand-written means": {"manual_means": True},
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_contract_admits_code_that_keeps_the_input_dtype(dtype, variant):
    worst = 0.0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        tokens = int(rng.choice([3, 16, 300, 1031]))
        lp, adv, mask = _inputs(seed, dtype, batch=8, tokens=tokens)
        # log-probs near powers of two make roundings land near their worst
        lp = round_to(np.where(rng.random(lp.shape) < 0.5, -np.exp2(rng.integers(-3, 3, lp.shape)) * 1.0039, lp), dtype)
        expected = reference(lp, adv, mask)
        tol = tolerance(expected, dtype, CONTRACT)
        got = _rounded_steps(lp, adv, mask, dtype, **VARIANTS[variant])
        for key, want in expected.outputs().items():
            worst = max(worst, float(error_ratio(got[key], want, tol[key]).max(initial=0)))
    assert worst <= 1, worst


def test_the_strict_promise_is_stricter_than_the_contract():
    """Rounding the average four times passes the contract and fails the built-ins' one-rounding promise."""
    strict_failures = 0
    for seed in range(40):
        lp, adv, mask = _inputs(seed, "bfloat16", batch=16, tokens=300)
        expected = reference(lp, adv, mask)
        got = _rounded_steps(lp, adv, mask, "bfloat16")
        contract = tolerance(expected, "bfloat16", CONTRACT)["token_averaged"]
        strict = tolerance(expected, "bfloat16", STRICT)["token_averaged"]
        assert error_ratio(got["token_averaged"], expected.token_averaged, contract).max() <= 1
        strict_failures += error_ratio(got["token_averaged"], expected.token_averaged, strict).max() > 1
    assert strict_failures > 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_running_sum_over_rows_of_16_tokens_is_caught(dtype):
    """The contract allows rounding the row sum once, not at every token: a running sum in the input dtype
    over 16 tokens leaves it in a good share of rows (a batch of 8 such rows is caught most of the time)."""
    rng = np.random.default_rng(0)
    rows = 400
    lp = round_to(-rng.exponential(1.0, (rows, 16)) * rng.choice([0.05, 1.0, 8.0], (rows, 1)), dtype)
    adv, mask = np.ones(rows), np.ones((rows, 16), bool)
    running = np.zeros(rows)
    for t in range(16):
        running = round_to(running + lp[:, t], dtype)
    expected = reference(lp, adv, mask)
    caught = error_ratio(running, expected.sequence_summed, tolerance(expected, dtype)["sequence_summed"]) > 1
    assert caught.mean() > 0.03, caught.mean()


def test_a_count_rounded_by_a_half_running_sum_is_caught():
    lp, adv, mask = -np.ones((1, 300)), np.ones(1), np.ones((1, 300), bool)
    expected = reference(lp, adv, mask)
    stuck_count = 256.0  # bf16: 256 + 1 rounds back to 256
    averaged = np.array([-300.0 / stuck_count])
    assert error_ratio(averaged, expected.token_averaged, tolerance(expected, "bfloat16")["token_averaged"])[0] > 1


def test_an_epsilon_in_a_float64_denominator_is_caught():
    lp, adv, mask = -np.ones((1, 1)), np.ones(1), np.ones((1, 1), bool)
    expected = reference(lp, adv, mask)
    averaged = np.array([-1.0 / (1 + 1e-8)])
    assert error_ratio(averaged, expected.token_averaged, tolerance(expected, "float64")["token_averaged"])[0] > 1


def test_ulps_count_at_the_exact_value_or_the_working_magnitude():
    assert ulp_error(np.array([1.0 + 2.0**-7]), np.array([1.0]), "bfloat16")[0] == 1.0
    assert ulp_error(np.array([1.0 + 2.0**-24]), np.array([1.0]), "float32")[0] == 0.5
    assert ulp_error(np.array([2.0**-7]), np.array([0.0]), "bfloat16", 1.0)[0] == 1.0
    assert ulp_error(np.array([np.nan]), np.array([0.0]), "float32")[0] == np.inf


@pytest.mark.parametrize(("mode", "shape"), [("seq-mean-token-mean", (1, 0)), ("token-sum", (2, 3)),
                                             ("seq-mean-token-sum", (3, 2))])
def test_a_reduction_without_a_selected_token_must_be_exactly_zero(mode, shape):
    """No selected token: every row sum is a sum of nothing, whatever the mode divides by (B = 1 here, not 0),
    so the loss is exactly 0 in every dtype and precision: not within the output dtype's subnormals."""
    from reference.case import Case
    from reference.contracts import get_contract
    from reference.exact import exact_results
    from reference.tolerance import PRECISIONS

    contract = get_contract("reduction", {"mode": mode})
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        case = Case(contract=contract, dtype=dtype, token_losses=np.ones(shape), token_mask=np.zeros(shape, bool))
        for precision in PRECISIONS.values():
            assert float(contract.tolerance(exact_results(case), dtype, precision)["loss"]) == 0.0, (dtype, precision)
