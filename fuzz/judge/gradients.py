"""Gradient checks: the implementation's VJP (torch autograd, torch.compile's compiled backward, jax.vjp)
against the contract's exact one, with tolerances from the same model (reference/tolerance.py).

Gradients must exist (an output the graph does not reach, or an input it does not reach, is its own failure,
never read as zeros), be finite everywhere (fully masked rows and an all-masked batch included) and exactly
0 at masked positions. A non-finite gradient where an exact intermediate of the backward exceeds the dtype's
range is reported as what it is, an overflow of that dtype, not as a NaN bug.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from hypothesis import strategies as st

from fuzz.judge.draws import draw_cotangents
from fuzz.judge.forward import empty_selection, float32_hint, non_finite_hint, said_once
from fuzz.judge.outputs import GRADIENT_STRUCTURE, check_gradient_arrays, check_outputs, modified_inputs
from fuzz.judge.verdict import STRUCTURE, Verdict, call_safely, named_by_forward_alone, out_of_tolerance, same_bits
from reference.case import Case
from reference.dtypes import largest
from reference.exact import exact_results
from reference.tolerance import Precision, error_ratio, ulp_error

GRADIENT_NON_FINITE = "non-finite gradient"
GRADIENT_OVERFLOW = "backward overflowed the dtype"
GRADIENT_MASKED = "gradient not 0 at masked positions"


def _non_finite(name: str, values: np.ndarray, overflow: str | None, mask: np.ndarray,
                dtype: str, hinted: dict[str, str], forward_hint: str | None = None) -> tuple[str, str]:
    """The kind and message of a non-finite gradient: an overflow of the dtype, or a bug (with what in the case
    makes the usual ones non-finite: a count of 0 divided by, under a where that keeps its inf or NaN out of
    the loss but not out of the backward; where 1 / 1e-8 exceeds the dtype's range (float16), a count of 0
    plus an epsilon, whose reciprocal overflows on its way back to the inputs and meets the mask's 0). Where the
    forward pass's outputs are not finite either, no guard kept them out: `forward_hint` is then what the forward's
    check says of the case (empty where it says nothing), said instead. A hint already said for another input is
    referred to (`said_once`)."""
    bad = np.argwhere(~np.isfinite(values))[0].tolist()
    seen = f"{name}{bad} = {float(values[tuple(bad)])!r}"
    if overflow is not None:
        return GRADIENT_OVERFLOW, f"{seen}: {said_once(hinted, overflow, name)}"
    if forward_hint is not None:
        hint = said_once(hinted, "the outputs are not finite here either, so no guard kept it out of the forward: "
                         + (forward_hint or "the forward's own failure"), name)
        return GRADIENT_NON_FINITE, f"{name} is not finite: {seen}: {hint}"
    empty = empty_selection(mask)
    # 1e-8: what trainers add to a count instead of clamping it (NeMo-RL, OpenRLHF, ROLL, torchtune)
    epsilon = (f" or by an epsilon (1 / (0 + 1e-8) is 1e8, past {dtype}'s range: inf times the mask's 0 is NaN)"
               if largest(dtype) < 1e8 else "")
    hint = said_once(hinted, f"{empty}: a division by its count of 0 guarded by a where (whose other branch's inf "
                     f"or NaN still reaches the backward){epsilon}?" if empty else None, name)
    return GRADIENT_NON_FINITE, f"{name} is not finite: {seen}" + (f": {hint}" if hint else "")


def outputs_finite(adapter: Any, case: Case, result: Any) -> bool | None:
    """Whether every output of a forward result is finite, read back as the forward's check reads it (None where
    it cannot be: that check says what is wrong with it)."""
    read, _ = check_outputs(result, adapter, case)
    return None if read is None else all(bool(np.isfinite(value).all()) for value in read.values.values())


def named_by_pass(verdict: Verdict, function: Callable[..., Any], adapter: Any, case: Case,
                  keywords: Mapping[str, Any] | None = None) -> Verdict:
    """The failing verdict of a call of `function` (with `keywords`) and its backward in one go on `case`, each
    failure named by the pass that raised it (`named_by_forward_alone`), the function called alone on inputs that
    need no gradient. Where that call returns what cannot be read as the contract's outputs (a tuple, a loss of
    shape (1,)), that is the verdict: the backward was started from a cotangent of each output's shape, so what
    raised there is the forward's structure bug, the one its forward cell reports. A wrong dtype or device alone
    cannot make the backward raise (its cotangent takes the output's): a backward that raised is its own bug there."""
    result, alone = call_safely(functools.partial(function, **(keywords or {})), *adapter.materialize(case))
    if alone.ok:
        read, structure = check_outputs(result, adapter, case)
        if read is None:
            return structure
    return named_by_forward_alone(verdict, function, lambda: alone)


def check_gradients(subject: Any, case: Case, cotangents: dict[str, np.ndarray], exact: Any,
                    repeat: bool = True) -> Verdict:
    """The subject's VJP for `cotangents` (one per output) against `exact`, the contract's; with `repeat`, a second
    backward pass for the determinism fact."""
    adapter, precision, contract = subject.adapter, subject.precision, case.contract
    inputs = adapter.materialize(case, requires_grad=True)
    snapshot = adapter.snapshot(inputs)
    function = subject.function_for(contract)
    result, verdict = call_safely(adapter.vjp, function, inputs, cotangents, contract)
    if not verdict.ok:
        return named_by_pass(verdict, function, adapter, case)
    verdict.merge(modified_inputs(adapter, case, inputs, snapshot))
    values, structure = check_gradient_arrays(result, adapter, case)
    verdict.merge(structure)
    verdict.merge(judge_gradients(case, {} if values is None else values.values, exact, cotangents, precision,
                                  forward_finite=outputs_finite(adapter, case, result.result)))
    if verdict.ok and repeat:
        verdict.deterministic = _same_gradients_again(subject, function, case, inputs, cotangents, values.values)
    return verdict


# An engine's own explanation of a wrong gradient, from (got, exact, tolerance): it knows the split
ExplainGradient = Callable[[np.ndarray, np.ndarray, np.ndarray], "str | None"]


def judge_gradients(case: Case, values: dict[str, np.ndarray], exact: Any, cotangents: dict[str, np.ndarray],
                    precision: Precision, explain: ExplainGradient | None = None,
                    forward_finite: bool | None = None, before: ExplainGradient | None = None) -> Verdict:
    """Gradients read back as float64 ("d <input>" for any of the differentiable inputs present) against the
    exact VJP taken with `cotangents`: shapes, finite (or an overflow of the dtype), exactly 0 at masked
    positions, within the tolerance model. A value out of tolerance is explained by `explain` where given, else
    by `before` (an engine's mistakes, weighed first) or the contract's `explain_gradient`; a non-finite one by
    what the case and `forward_finite` (whether the same call's outputs were finite, where known) say of it."""
    contract, verdict = case.contract, Verdict()
    forward_hint = (non_finite_hint(case) or "") if forward_finite is False else None
    tolerances = contract.gradient_tolerance(exact, cotangents, case.dtype, precision)
    overflow = contract.backward_overflow(exact, cotangents, case.dtype, precision)
    mask = case.mask
    hinted: dict[str, str] = {}  # a hint said, and the gradient it was said for
    for spec in contract.differentiable_inputs:
        name = f"d {spec.name}"
        if name not in values:
            continue
        got, want = values[name], exact.inputs()[spec.name]
        bound, scale = tolerances[spec.name]
        if got.shape != want.shape:
            verdict.fail(GRADIENT_STRUCTURE, f"{name} has shape {got.shape}, expected {want.shape}")
            continue
        if not np.isfinite(got).all():
            verdict.fail(*_non_finite(name, got, overflow, mask, case.dtype, hinted, forward_hint))
        if spec.role == "tokens" and (got[~mask] != 0).any():
            verdict.fail(GRADIENT_MASKED, f"{name} is not exactly 0 at masked positions")
        ratios = error_ratio(got, want, bound)
        verdict.error_ratios[name] = float(np.max(ratios, initial=0.0))
        verdict.ulps = max(verdict.ulps, float(np.max(ulp_error(got, want, case.dtype, scale), initial=0.0)))
        if verdict.error_ratios[name] > 1 and np.isfinite(got).all():
            at = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
            if explain is not None:
                hint = explain(got, want, bound)
            else:
                hint = before(got, want, bound) if before is not None else None
                if hint is None and contract.explain_gradient is not None:
                    hint = contract.explain_gradient(case, cotangents, {spec.name: got})
            hint = hint or float32_hint(case.dtype, got, want, lambda name=spec.name: contract.gradient_tolerance(
                exact, cotangents, "float32", precision)[name][0])
            verdict.fail(
                out_of_tolerance(name),
                f"{name}{list(map(int, at))} = {float(got[at])!r}, expected {float(want[at])!r} "
                f"(err/tol = {verdict.error_ratios[name]:.3g}, tol = {float(bound[at]):.3g})"
                + (f": {hint}" if hint else ""),
            )
    return verdict


def _same_gradients_again(subject: Any, function: Any, case: Case, inputs: Any, cotangents: dict[str, np.ndarray],
                          first: dict[str, np.ndarray]) -> bool:
    """Whether a second backward pass on the same inputs gives the same bits (atomics would not)."""
    again, verdict = call_safely(subject.adapter.vjp, function, inputs, cotangents, case.contract)
    if not verdict.ok:
        return False
    values, _ = check_gradient_arrays(again, subject.adapter, case)
    return values is not None and same_bits(first, values.values)


def gradient_example(subject: Any, case: Case, data: st.DataObject, repeat: bool = True) -> Verdict:
    """One gradient example: draw cotangents, check the VJP against the exact one (`repeat`: see check_gradients)."""
    cotangents = draw_cotangents(data, case)
    exact = case.contract.vjp(case, cotangents, exact_results(case))
    with subject.adapter.scope(case, compiled=subject.compiled):
        verdict = check_gradients(subject, case, cotangents, exact, repeat)
    # a forward that returned what the contract does not (named_by_pass) is the forward cell's bug, and its snippet is
    # the forward's: a backward from cotangents of the contract's shapes only fails on it without saying why
    verdict.cotangents = None if verdict.kind == STRUCTURE else cotangents
    return verdict
