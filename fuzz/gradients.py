"""Gradient checks: the implementation's VJP (torch autograd, torch.compile's compiled backward, jax.vjp)
against the exact one in reference/vjp.py, with tolerances from the same model (fuzz/tolerance.py).

Gradients must be finite everywhere (fully masked rows and an all-masked batch included) and exactly 0
at masked positions. The kink of |x| at 0: where s_i is exactly 0 because A_i = 0 or every selected
log-prob is 0, every implementation computes an exact 0 and sign(0) = 0 decides it; where the exact s_i is
non-zero but within its forward tolerance of 0, a correct implementation may compute either sign, so such
cases are rejected (hypothesis.assume) when the ratio has a cotangent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from fuzz.checks import Verdict, call_safely
from fuzz.tolerance import error_ratio, gradient_tolerance, tolerance
from impls.case import Case
from impls.dtypes import round_to
from reference import Gradients, complete_cotangents, vjp

COTANGENT_KINDS = ("all outputs", "ratio only", "vectors only", "zero")


def draw_cotangents(data: st.DataObject, case: Case) -> dict[str, np.ndarray]:
    kind = data.draw(st.sampled_from(COTANGENT_KINDS), label="cotangents")
    seed = data.draw(st.integers(0, 2**32 - 1), label="cotangent seed")
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


def kink_is_undecided(exact: Gradients, dtype: str, cotangents: dict[str, np.ndarray]) -> bool:
    """True if some |s_i| is non-zero but within its tolerance of 0 while the ratio has a cotangent."""
    if float(cotangents["magnitude_ratio"]) == 0:
        return False
    expected = exact.expected
    tol = tolerance(expected, dtype).sequence_summed
    summed = np.abs(expected.sequence_summed)
    return bool(((summed > 0) & (summed <= tol)).any())


def check_gradients(subject: Any, case: Case, cotangents: dict[str, np.ndarray], exact: Gradients) -> Verdict:
    """The subject's VJP for `cotangents` (all three outputs) against `exact`, the reference's."""
    adapter = subject.adapter
    inputs = adapter.materialize(case, requires_grad=True)
    snapshot = adapter.snapshot(inputs)
    result, verdict = call_safely(adapter.vjp, subject.function, inputs, cotangents)
    if not verdict.ok:
        verdict.failures = [f"backward {failure}" for failure in verdict.failures]
        return verdict
    _, grad_log_probs, grad_advantages = result
    verdict.failures += adapter.changes(inputs, snapshot)
    tol = gradient_tolerance(exact, cotangents, case.dtype)
    for name, got, want, bound, shape in (
        ("d token_log_probs", grad_log_probs, exact.token_log_probs, tol.token_log_probs, case.shape),
        ("d advantages", grad_advantages, exact.advantages, tol.advantages, case.shape[:1]),
    ):
        if not adapter.is_array(got):
            verdict.failures.append(f"{name} is a {type(got).__name__}, not a {adapter.array_type}")
            continue
        if adapter.dtype_of(got) != case.dtype:
            verdict.failures.append(f"{name} has dtype {adapter.dtype_of(got)}, expected {case.dtype}")
        values = adapter.to_float64(got)
        if values.shape != shape:
            verdict.failures.append(f"{name} has shape {values.shape}, expected {shape}")
            continue
        if not np.isfinite(values).all():
            bad = np.argwhere(~np.isfinite(values))[0].tolist()
            verdict.failures.append(f"{name} is not finite: {float(values[tuple(bad)])!r} at {bad}")
        if name == "d token_log_probs" and (values[~case.token_mask] != 0).any():
            verdict.failures.append(f"{name} is not exactly 0 at masked positions")
        ratios = error_ratio(values, want, bound)
        verdict.error_ratios[name] = float(np.max(ratios, initial=0.0))
        if verdict.error_ratios[name] > 1:
            at = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
            row = int(at[0])
            # sign(0) decides the gradient only where the ratio depends on |s_row|: not when its denominator is 0
            kink = (exact.expected.sequence_summed[row] == 0 and exact.expected.selected_counts[row] > 0
                    and float(cotangents["magnitude_ratio"]) != 0 and exact.expected.denominator > 0)
            verdict.failures.append(
                f"{name}{list(map(int, at))} = {float(values[at])!r}, expected {float(want[at])!r} "
                f"(err/tol = {verdict.error_ratios[name]:.3g})"
                + (f"; sequence_summed[{row}] is exactly 0 there, and the contract differentiates |x| at 0 as 0 "
                   "(sign(0) = 0, as torch.abs; jnp.abs gives 1: use x * jnp.sign(x))" if kink else "")
            )
    return verdict


def gradient_example(subject: Any, case: Case, data: st.DataObject) -> Verdict:
    """One gradient example: draw cotangents, keep off undecided kinks, check the VJP."""
    cotangents = complete_cotangents(draw_cotangents(data, case), case.shape[0])
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents)
    assume(not kink_is_undecided(exact, case.dtype, cotangents))
    verdict = check_gradients(subject, case, cotangents, exact)
    verdict.cotangents = cotangents
    return verdict
