"""Metamorphic relations: properties that tie two calls of the same implementation together, needing no
expected answer. Each compares two outputs that are each within the tolerance model of their own exact
values, so they may differ by the sum of the two tolerances and no more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fuzz.checks import Verdict, check_forward_values
from fuzz.strategies import next_token_size
from fuzz.tolerance import CONTRACT, Precision, Tolerance, error_ratio, tolerance
from impls.case import Case
from impls.frameworks import Framework
from reference import reference

RELATIONS: tuple[str, ...] = ("pad with masked columns", "permute rows", "split the batch", "scale advantages")
PADDING_VALUE = -3.5  # finite in every dtype; masked out, so it must change nothing
RATIO_BOUNDS = "ratio outside [1, max n_i]"


def relation_kind(relation: str) -> str:
    """The failure kind of a relation that does not hold: each relation is a distinct bug."""
    return f"relation '{relation}' broken"


def _compare(name: str, got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> Verdict:
    ratios = error_ratio(got, want, tol)
    verdict = Verdict(error_ratios={name: float(np.max(ratios, initial=0.0))})
    if verdict.error_ratios[name] > 1:
        verdict.fail(
            relation_kind(name.split(":")[0].split(" by ")[0]),
            f"{name}: {np.array2string(np.asarray(got), threshold=6)} != "
            f"{np.array2string(np.asarray(want), threshold=6)} (err/tol = {verdict.error_ratios[name]:.3g})"
        )
    return verdict


def _second_call(fn: Callable[..., Any], adapter: Framework, case: Case, relation: str,
                 precision: Precision) -> tuple[Any, Verdict]:
    """The second call of a relation. If it fails on its own, against the reference, that transformed case
    is the one to report: its snippet then reproduces the failure without the first call (and it is the
    same kind of failure as a direct one, so the report shows it once)."""
    values, second = check_forward_values(fn, adapter, case, precision)
    verdict = Verdict()
    verdict.merge(second, prefix=f"{relation} (second call): ")
    if not verdict.ok:
        verdict.case = case.with_(story=(*case.story, ("derived by", relation)))
    return values, verdict


def check_relation(
    relation: str, fn: Callable[..., Any], adapter: Framework, case: Case, values: dict[str, np.ndarray],
    precision: Precision = CONTRACT,
) -> Verdict:
    """Check one relation between `values` (fn on `case`) and fn on a transformed case."""
    batch, tokens = case.shape

    def _tolerance(some_case: Case) -> Tolerance:
        exact = reference(some_case.token_log_probs, some_case.advantages, some_case.token_mask)
        return tolerance(exact, some_case.dtype, precision)

    def _run(some_case: Case) -> tuple[Any, Verdict]:
        return _second_call(fn, adapter, some_case, relation, precision)

    tol = _tolerance(case)
    verdict = Verdict()
    if relation == "pad with masked columns":
        extra = next_token_size(tokens) - tokens
        padded = case.with_(
            token_log_probs=np.hstack([case.token_log_probs, np.full((batch, extra), PADDING_VALUE)]),
            token_mask=np.hstack([case.token_mask, np.zeros((batch, extra), bool)]),
        )
        second, run_verdict = _run(padded)
        verdict.merge(run_verdict)
        if second is not None:
            for key, got in second.items():
                verdict.merge(_compare(f"{relation}: {key}", got, values[key], 2 * tol.as_dict()[key]))
        return verdict
    if relation == "permute rows":
        order = np.random.default_rng(batch * 7919 + tokens).permutation(batch)
        permuted = case.with_(
            token_log_probs=case.token_log_probs[order], advantages=case.advantages[order],
            token_mask=case.token_mask[order],
        )
        second, run_verdict = _run(permuted)
        verdict.merge(run_verdict)
        if second is not None:
            tol_second = _tolerance(permuted)
            for key in ("sequence_summed", "token_averaged"):
                bound = tol.as_dict()[key][order] + tol_second.as_dict()[key]
                verdict.merge(_compare(f"{relation}: {key}", second[key], values[key][order], bound))
            bound = tol.magnitude_ratio + tol_second.magnitude_ratio
            verdict.merge(_compare(f"{relation}: magnitude_ratio", second["magnitude_ratio"],
                                   values["magnitude_ratio"], bound))
        return verdict
    if relation == "split the batch":
        if batch < 2:
            return verdict
        half = (batch + 1) // 2
        parts = []
        for rows in (slice(0, half), slice(half, batch)):
            part = case.with_(token_log_probs=case.token_log_probs[rows], advantages=case.advantages[rows],
                              token_mask=case.token_mask[rows])
            second, run_verdict = _run(part)
            verdict.merge(run_verdict)
            if second is None:
                return verdict
            parts.append(second)
        for key in ("sequence_summed", "token_averaged"):
            joined = np.concatenate([part[key] for part in parts])
            verdict.merge(_compare(f"{relation}: {key}", joined, values[key], 2 * tol.as_dict()[key]))
        summed = np.concatenate([part["sequence_summed"] for part in parts])
        averaged = np.concatenate([part["token_averaged"] for part in parts])
        denominator = np.abs(averaged).sum()
        joined_ratio = np.abs(summed).sum() / denominator if denominator > 0 else 0.0
        verdict.merge(_compare(f"{relation}: magnitude_ratio from the chunks' vectors", np.asarray(joined_ratio),
                               values["magnitude_ratio"], 2 * tol.magnitude_ratio))
        return verdict
    if relation == "scale advantages":
        for factor in (2.0, -1.0):  # powers of two: exact, and within the magnitude bound's headroom
            scaled = case.with_(advantages=case.advantages * factor)
            second, run_verdict = _run(scaled)
            verdict.merge(run_verdict)
            if second is None:
                return verdict
            tol_second = _tolerance(scaled)
            for key in ("sequence_summed", "token_averaged"):
                bound = abs(factor) * tol.as_dict()[key] + tol_second.as_dict()[key]
                verdict.merge(_compare(f"{relation} by {factor:g}: {key}", second[key], factor * values[key], bound))
            bound = tol.magnitude_ratio + tol_second.magnitude_ratio
            verdict.merge(_compare(f"{relation} by {factor:g}: magnitude_ratio", second["magnitude_ratio"],
                                   values["magnitude_ratio"], bound))
        return verdict
    raise ValueError(f"unknown relation {relation!r}")


def check_ratio_bounds(case: Case, values: dict[str, np.ndarray], precision: Precision = CONTRACT) -> Verdict:
    """When the exact denominator is positive, 1 <= R <= max n_i, within tolerance."""
    expected = reference(case.token_log_probs, case.advantages, case.token_mask)
    verdict = Verdict()
    if expected.denominator == 0:
        return verdict
    tol = float(tolerance(expected, case.dtype, precision).magnitude_ratio)
    ratio = float(values["magnitude_ratio"])
    upper = float(expected.selected_counts.max())
    if not (1 - tol <= ratio <= upper + tol):
        verdict.fail(RATIO_BOUNDS, f"magnitude_ratio = {ratio!r} is outside [1, max n_i = {upper:g}] (tol {tol:.3g})")
    return verdict
