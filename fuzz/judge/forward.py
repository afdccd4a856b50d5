"""The forward checks of one call: the function on a case's native inputs, judged for structure, unchanged
inputs, finiteness and values within the one tolerance model (reference/tolerance.py, the contract's
bounds), and, with `repeat`, determinism (a second call on the same inputs gives the same bits)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fuzz.judge.outputs import ReadBack, check_outputs, modified_inputs
from fuzz.judge.verdict import FORWARD_OVERFLOW, NON_FINITE, Verdict, call_safely, out_of_tolerance, same_bits
from impls.frameworks import Framework
from reference.case import Case
from reference.dtypes import largest, round_to
from reference.exact import exact_results, exact_tolerance
from reference.tolerance import CONTRACT, Precision, error_ratio, ulp_error

SECOND_CALL = "second call on the same inputs: "  # what a failure of the determinism call says first


def failed_on_the_second_call(verdict: Verdict) -> bool:
    """Whether the example failed only in its second call (the first one passed every check)."""
    return bool(verdict.failures) and all(failure.message.startswith(SECOND_CALL) for failure in verdict.failures)


def non_finite_hint(case: Case) -> str | None:
    """What in the case makes the usual mistakes non-finite where the exact results are finite: inf or NaN at
    masked-out positions (multiplied by a 0 mask rather than selected), no selected token in a row or in the
    batch (a mean of nothing, 0 / 0)."""
    mask, hints = case.mask, []
    for spec in case.contract.inputs:
        held = case.values[spec.name]
        if spec.kind == "bool" or held.shape != mask.shape:
            continue
        hidden = held[~mask]
        special = sorted({repr(float(value)) for value in hidden[~np.isfinite(hidden)]})
        if special:
            why = "0 * inf is NaN" if any(value != "nan" for value in special) else "0 * NaN is NaN"
            hints.append(f"masked-out {spec.name} hold {', '.join(special)}: multiplied by the mask ({why}) rather "
                         "than selected with a where? (where your padding is finite by construction, declare it: "
                         "--masked-values finite, masked_values=\"finite\" in check)")
        elif hint := _overflowing_padding(spec.name, held, mask, case.dtype):
            hints.append(hint)
    if empty := empty_selection(mask):
        whose = "its" if empty == EMPTY_ROW else "a"
        # the epsilon trainers add to a count instead of clamping it (1e-8) is below float16's smallest value
        vanishes = (f"; an epsilon added to the count is no guard in {case.dtype}: 0 + 1e-8 rounds to 0 (clamp the "
                    "count to 1 instead)" if float(round_to(np.array(1e-8), case.dtype)) == 0 else "")
        hints.append(f"{empty}: {whose} mean over none of them (0 / 0{vanishes})?")
    if mask.ndim > 1 and mask.shape[0] == 0:  # a batch of no rows: what a per-row mean, or B, then divides by
        hints.append("the batch has no rows: a mean over its rows (`.mean()` of an empty array is NaN), or a "
                     "division by their number (B = 0)?")
    if mask.ndim and mask.shape[-1] == 0:  # what a length read from the shape is, where there is nothing to select
        hints.append("a length taken from the shape (the padded width, 0 here)?")
    return "; or ".join(hints) or None


def _overflowing_padding(name: str, held: np.ndarray, mask: np.ndarray, dtype: str) -> str | None:
    """Finite masked-out values that carry a sum over every position (a row's, or the batch's) past the dtype's
    range, where the same sum of the selected ones stays in it: a sum taken before the masking (or a `sum() * 0.0`
    that keeps a graph connected) is inf there, and inf times a 0 mask or weight is NaN."""
    if not held.size or held.ndim != mask.ndim:
        return None
    selected = np.where(mask, held, 0.0)
    sums = np.abs(np.append(held.sum(axis=-1), held.sum()))
    selected_sums = np.abs(np.append(selected.sum(axis=-1), selected.sum()))
    limit = largest(dtype)
    if not (sums >= limit).any() or (selected_sums >= limit).any():
        return None
    return (f"masked-out {name} are finite but large (up to {float(np.abs(held[~mask]).max()):.3g}): a sum that "
            f"includes them overflows {dtype} to inf, and inf times 0 (a mask, or a `* 0.0` kept for the graph) is "
            "NaN: select with a where before summing?")


def said_once(hinted: dict[str, str], hint: str | None, name: str) -> str | None:
    """`hint` the first time it is said in a verdict; after that, where it was said: a hint on the case (inf at
    masked positions, a row with no token) is the same for every output that it makes non-finite."""
    if hint is None:
        return None
    if hint in hinted:
        return f"see {hinted[hint]} above"
    hinted[hint] = name
    return hint


def empty_selection(mask: np.ndarray) -> str | None:
    """Where the mask selects nothing, as a report says it: in the whole batch, or in a row."""
    if not mask.any():
        return "no token is selected" + (f" (the batch is {'x'.join(map(str, mask.shape))})" if not mask.size else "")
    if mask.ndim and not mask.any(axis=-1).all():
        return EMPTY_ROW
    return None


EMPTY_ROW = "a row selects no token"


FLOAT32_INSIDE_FLOAT64 = "within float32's error bound: computed in float32 inside float64 code?"


def float32_hint(dtype: str, got: np.ndarray, want: np.ndarray, float32_bound: Callable[[], np.ndarray]) -> str | None:
    """A float64 value (an output, a gradient) off by what float32 arithmetic would give: within twice float32's
    bound for the same exact values (rounding the float64 inputs to float32 adds at most one more term of that
    bound). `float32_bound` works that bound out, only for a float64 case."""
    if dtype != "float64" or np.max(error_ratio(got, want, float32_bound()), initial=0.0) > 2:
        return None
    return FLOAT32_INSIDE_FLOAT64


def compare_values(got: ReadBack, case: Case, precision: Precision,
                   explain: Callable[[Case, dict[str, np.ndarray]], str | None] | None = None,
                   given: Case | None = None) -> Verdict:
    """Values within the tolerance model, and finite wherever the exact results are (a non-finite value where
    an exact intermediate exceeds the dtype's range is named as that overflow, another by what in the case makes
    the usual mistakes non-finite: in `given`, the batch the function was given where an engine padded `case`).
    A value out of tolerance gets the contract's explanation (or `explain`'s, an engine's that knows what the
    function was given) where one matches, else, in float64, the float32 rounding it is within."""
    contract, expected, verdict = case.contract, exact_results(case), Verdict()
    explain = explain or contract.explain
    tol = exact_tolerance(case, precision)
    scales = contract.ulp_scales(expected)  # the magnitudes the sums work at (see ulp_error)
    hinted: dict[str, str] = {}  # a hint said, and the output it was said for
    for key, want in expected.outputs().items():
        value = got.values[key]
        if not np.isfinite(value).all():
            overflow = contract.forward_overflow(expected, case.dtype, key)
            seen = f"{key} is not finite: {np.array2string(value, threshold=8)}"
            hint = said_once(hinted, overflow or non_finite_hint(given or case), key)
            verdict.fail(FORWARD_OVERFLOW if overflow else NON_FINITE, f"{seen}: {hint}" if hint else seen)
        ratios = error_ratio(value, want, tol[key])
        verdict.error_ratios[key] = float(np.max(ratios, initial=0.0))
        # ulps of the input dtype, as for gradients: a float32 loss of half inputs would otherwise show thousands for
        # the half-precision steps the contract allows
        ulps = ulp_error(value, want, case.dtype, scales[key])
        verdict.ulps = max(verdict.ulps, float(np.max(ulps, initial=0.0)))
        if verdict.error_ratios[key] > 1:
            where = int(np.argmax(ratios)) if ratios.ndim else None
            at = "" if where is None else f"[{where}]"
            got_at, want_at = (value[where], want[where]) if where is not None else (value, want)
            named = explain(case, got.values) if explain is not None else None
            hint = named or float32_hint(case.dtype, value, want, lambda key=key: contract.tolerance(
                expected, "float32", precision)[key])
            verdict.fail(
                out_of_tolerance(key),
                f"{key}{at} = {float(got_at)!r}, expected {float(want_at)!r} "
                f"(err/tol = {verdict.error_ratios[key]:.3g}, tol = {float(tol[key].flat[where or 0]):.3g})"
                + (f": {hint}" if hint else ""),
                hint=named,
            )
    return verdict


def run_case(fn: Callable[..., Any], adapter: Framework, case: Case, repeat: bool = False,
             judge: Callable[[ReadBack], Verdict] | None = None) -> tuple[ReadBack | None, Verdict]:
    """Call fn on the case's native inputs; check structure and that inputs were not modified, then `judge` the
    values read back. With `repeat`, and only if all of that passed, call it a second time on the same inputs
    and record whether the bits are the same (a fact for the report, not a failure: kernels with atomics are not
    deterministic). A failing example skips that second call: the shrinker runs hundreds of failing examples,
    and the fact would not be reported for them anyway.

    Returns the outputs read back (None if unusable) and the verdict so far."""
    inputs = adapter.materialize(case)
    snapshot = adapter.snapshot(inputs)
    result, verdict = call_safely(fn, *inputs)
    if not verdict.ok:
        return None, verdict
    values, structure = check_outputs(result, adapter, case)
    verdict.merge(structure)
    verdict.merge(modified_inputs(adapter, case, inputs, snapshot))
    if values is None:
        return None, verdict
    if judge is not None:
        verdict.merge(judge(values))
    if repeat and verdict.ok:
        again, second = call_safely(fn, *inputs)
        if not second.ok:
            verdict.merge(second, prefix=SECOND_CALL)
        else:
            repeated, _ = check_outputs(again, adapter, case)
            verdict.deterministic = repeated is not None and same_bits(values.values, repeated.values)
    return values, verdict


def check_forward_values(fn: Callable[..., Any], adapter: Framework, case: Case, precision: Precision = CONTRACT,
                         repeat: bool = False) -> tuple[ReadBack | None, Verdict]:
    """The forward pass against the exact results: structure, dtypes, devices, finiteness, values, inputs
    (and, with `repeat`, determinism). Also returns the outputs read back (None if unusable)."""
    return run_case(fn, adapter, case, repeat, judge=lambda values: compare_values(values, case, precision))


def check_forward(fn: Callable[..., Any], adapter: Framework, case: Case, precision: Precision = CONTRACT) -> Verdict:
    return check_forward_values(fn, adapter, case, precision)[1]
