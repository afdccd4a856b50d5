"""Gradient checks: the implementation's VJP (torch autograd, torch.compile's compiled backward, jax.vjp)
against the exact one in reference/vjp.py, with tolerances from the same model (reference/tolerance.py).

Gradients must be finite everywhere (fully masked rows and an all-masked batch included) and exactly 0
at masked positions. At the kink of |x| (s_i exactly 0, or within its forward tolerance of 0) any
subgradient in [-1, 1] is right: the tolerance model widens that row's tolerance rather than keeping such
cases out of the draw. A non-finite gradient where an exact intermediate of the backward exceeds the
dtype's range is reported as what it is, an overflow of that dtype, not as a NaN bug.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from fuzz.checks import INPUT_MODIFIED, Verdict, call_safely, modified_inputs, out_of_tolerance, same_bits
from fuzz.exact import exact as exact_results
from fuzz.strategies import SEEDS, choice
from impls.case import Case
from impls.dtypes import largest, round_to
from reference import Gradients, complete_cotangents, vjp
from reference.tolerance import Precision, backward_overflows, error_ratio, gradient_tolerance, ulp_error

COTANGENT_KINDS = ("all outputs", "ratio only", "vectors only", "zero")
GRADIENT_STRUCTURE = "wrong gradient structure"
GRADIENT_NON_FINITE = "non-finite gradient"
GRADIENT_OVERFLOW = "backward overflowed the dtype"
GRADIENT_MASKED = "gradient not 0 at masked positions"


def draw_cotangents(data: st.DataObject, case: Case) -> dict[str, np.ndarray]:
    kind = data.draw(choice(COTANGENT_KINDS), label="cotangents")
    seed = data.draw(SEEDS, label="cotangent seed")
    rng = np.random.default_rng(seed)
    batch, _ = case.shape
    cotangents = {
        "sequence_summed": round_to(rng.normal(size=batch), case.dtype),
        "token_averaged": round_to(rng.normal(size=batch), case.dtype),
        "magnitude_ratio": round_to(np.array(rng.normal()), case.dtype),
    }
    if kind == "ratio only":
        cotangents["sequence_summed"][:] = cotangents["token_averaged"][:] = 0.0
    elif kind == "vectors only":
        cotangents["magnitude_ratio"] = np.array(0.0)
    elif kind == "zero":
        cotangents = {key: np.zeros_like(value) for key, value in cotangents.items()}
    return cotangents


def _non_finite(name: str, values: np.ndarray, overflow: float | None, dtype: str) -> tuple[str, str]:
    """The kind and message of a non-finite gradient: an overflow of the dtype, or a bug."""
    bad = np.argwhere(~np.isfinite(values))[0].tolist()
    seen = f"{name}{bad} = {float(values[tuple(bad)])!r}"
    if overflow is None:
        return GRADIENT_NON_FINITE, f"{name} is not finite: {seen}"
    return GRADIENT_OVERFLOW, (
        f"{seen}: the backward overflowed {dtype}: an exact intermediate of it reaches {overflow:.3g} (the "
        f"ratio's derivative through D is N / D^2 times its cotangent), beyond {dtype}'s largest value "
        f"{largest(dtype):.6g}; compute the ratio (or the whole function) in float32 and cast the outputs"
    )


def check_gradients(subject: Any, case: Case, cotangents: dict[str, np.ndarray], exact: Gradients) -> Verdict:
    """The subject's VJP for `cotangents` (all three outputs) against `exact`, the reference's."""
    adapter, precision = subject.adapter, subject.precision
    inputs = adapter.materialize(case, requires_grad=True)
    snapshot = adapter.snapshot(inputs)
    result, verdict = call_safely(adapter.vjp, subject.function, inputs, cotangents)
    if not verdict.ok:
        failed = verdict.failures
        verdict.failures = []
        for failure in failed:
            verdict.fail(f"backward {failure.kind}", f"backward {failure.message}")
        return verdict
    _, grad_log_probs, grad_advantages = result
    for change in modified_inputs(adapter, inputs, snapshot):
        verdict.fail(INPUT_MODIFIED, change)
    values = {}
    for name, got in (("d token_log_probs", grad_log_probs), ("d advantages", grad_advantages)):
        if not adapter.is_array(got):
            verdict.fail(GRADIENT_STRUCTURE, f"{name} is a {type(got).__name__}, not a {adapter.array_type}")
            continue
        if adapter.dtype_of(got) != case.dtype:
            verdict.fail(GRADIENT_STRUCTURE, f"{name} has dtype {adapter.dtype_of(got)}, expected {case.dtype}")
        values[name] = adapter.to_float64(got)
    verdict.merge(judge_gradients(case, values, exact, cotangents, precision))
    if verdict.ok:
        verdict.deterministic = _same_gradients_again(subject, inputs, cotangents, result)
    return verdict


def judge_gradients(case: Case, values: dict[str, np.ndarray], exact: Gradients, cotangents: dict[str, np.ndarray],
                    precision: Precision) -> Verdict:
    """Gradients read back as float64 (any of "d token_log_probs", "d advantages" present) against the exact
    VJP taken with `cotangents`: shapes, finite (or an overflow of the dtype), exactly 0 at masked positions,
    within the tolerance model."""
    verdict = Verdict()
    tol = gradient_tolerance(exact, cotangents, case.dtype, precision)
    overflow = backward_overflows(exact, cotangents, case.dtype, precision)
    for name, want, bound, scale in (
        ("d token_log_probs", exact.token_log_probs, tol.token_log_probs, tol.token_log_probs_scale),
        ("d advantages", exact.advantages, tol.advantages, tol.advantages_scale),
    ):
        if name not in values:
            continue
        got = values[name]
        if got.shape != want.shape:
            verdict.fail(GRADIENT_STRUCTURE, f"{name} has shape {got.shape}, expected {want.shape}")
            continue
        if not np.isfinite(got).all():
            verdict.fail(*_non_finite(name, got, overflow, case.dtype))
        if name == "d token_log_probs" and (got[~case.token_mask] != 0).any():
            verdict.fail(GRADIENT_MASKED, f"{name} is not exactly 0 at masked positions")
        ratios = error_ratio(got, want, bound)
        verdict.error_ratios[name] = float(np.max(ratios, initial=0.0))
        verdict.ulps = max(verdict.ulps, float(np.max(ulp_error(got, want, case.dtype, scale), initial=0.0)))
        if verdict.error_ratios[name] > 1 and np.isfinite(got).all():
            at = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
            verdict.fail(
                out_of_tolerance(name),
                f"{name}{list(map(int, at))} = {float(got[at])!r}, expected {float(want[at])!r} "
                f"(err/tol = {verdict.error_ratios[name]:.3g}, tol = {float(bound[at]):.3g})",
            )
    return verdict


def _same_gradients_again(subject: Any, inputs: Any, cotangents: dict[str, np.ndarray], first: Any) -> bool:
    """Whether a second backward pass on the same inputs gives the same bits (atomics would not)."""
    adapter = subject.adapter
    again, verdict = call_safely(adapter.vjp, subject.function, inputs, cotangents)
    if not verdict.ok:
        return False
    try:
        return same_bits({"lp": adapter.to_float64(first[1]), "adv": adapter.to_float64(first[2])},
                         {"lp": adapter.to_float64(again[1]), "adv": adapter.to_float64(again[2])})
    except Exception:  # a second pass that returns something else entirely: not the same bits
        return False


def gradient_example(subject: Any, case: Case, data: st.DataObject) -> Verdict:
    """One gradient example: draw cotangents, check the VJP against the exact one."""
    cotangents = complete_cotangents(draw_cotangents(data, case), case.shape[0])
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents, exact_results(case))
    with subject.adapter.scope(case, compiled=subject.compiled):
        verdict = check_gradients(subject, case, cotangents, exact)
    verdict.cotangents = cotangents
    return verdict
