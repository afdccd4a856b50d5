"""The contract's metamorphic relations and invariants, run: properties that tie two calls of the same
function together (or bound one call's values), needing no expected answer. Each side of a relation is
within its own tolerance of its exact value, so the contract's comparisons allow the sum of both; a broken
relation is a failure kind of its own."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzz.judge.forward import check_forward_values
from fuzz.judge.verdict import Verdict
from reference.case import Case
from reference.contract import Comparison
from reference.exact import exact_results, exact_tolerance
from reference.tolerance import CONTRACT, Precision, error_ratio


def relation_kind(relation: str) -> str:
    """The failure kind of a relation that does not hold: each relation is a distinct bug."""
    return f"relation '{relation}' broken"


def _compare(relation: str, comparison: Comparison) -> Verdict:
    name = f"{relation}: {comparison.label}"
    ratios = error_ratio(comparison.got, comparison.want, comparison.tolerance)
    verdict = Verdict(error_ratios={name: float(np.max(ratios, initial=0.0))})
    if verdict.error_ratios[name] > 1:
        verdict.fail(
            relation_kind(relation),
            f"{name}: {np.array2string(np.asarray(comparison.got), threshold=6)} != "
            f"{np.array2string(np.asarray(comparison.want), threshold=6)} (err/tol = {verdict.error_ratios[name]:.3g})"
        )
    return verdict


def check_relation(relation: str, subject: Any, case: Case, values: dict[str, np.ndarray]) -> Verdict:
    """One relation of the case's contract between `values` (the subject's function on `case`) and its function
    on the derived cases (for a relation that binds other declared parameters, the function for those).

    If a second call fails on its own, against the exact results, its case is the one to report: its
    snippet reproduces the failure without the first call (and it is the same kind of failure as a direct
    one, so the report shows it once)."""
    contract = case.contract
    spec = next((r for r in contract.relations if r.name == relation), None)
    if spec is None:
        raise ValueError(f"unknown relation {relation!r} of {contract.name}")
    verdict, results, precision = Verdict(), [], subject.precision
    derived = spec.derive(case)
    for second in derived:
        got, run = check_forward_values(subject.function_for(second.contract), subject.adapter, second, precision)
        verdict.merge(run, prefix=f"{relation} (second call): ")
        if not run.ok and verdict.case is None:
            verdict.case = second.with_(story=(*second.story, ("derived by", relation)))
        if got is None:
            return verdict
        results.append(got.values)

    def tolerance_of(other: Case) -> dict[str, np.ndarray]:
        return exact_tolerance(other, precision)

    for comparison in spec.compare(case, values, derived, tuple(results), tolerance_of):
        verdict.merge(_compare(relation, comparison))
    return verdict


def check_invariants(case: Case, values: dict[str, np.ndarray], precision: Precision = CONTRACT) -> Verdict:
    """Every invariant of the case's contract on one call's values (bounds its results must respect)."""
    contract, verdict = case.contract, Verdict()
    expected = exact_results(case)
    tol = exact_tolerance(case, precision)
    for invariant in contract.invariants:
        failure = invariant.check(case, expected, values, tol)
        if failure is not None:
            verdict.fail(invariant.kind, failure)
    return verdict
