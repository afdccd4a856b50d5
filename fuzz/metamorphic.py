"""Metamorphic relations: properties that tie two calls of the same implementation together, needing no
expected answer. Each compares two outputs that are each within the tolerance model of their own exact
values, so they may differ by the sum of the two tolerances and no more.

The relations are a table of small functions (RELATIONS), each given the first call's case and values and
returning a Verdict; a broken relation is a failure kind of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuzz.checks import Verdict, check_forward_values
from fuzz.exact import exact
from fuzz.strategies import next_token_size
from impls.case import Case
from impls.frameworks import Framework
from reference.tolerance import CONTRACT, Precision, Tolerance, error_ratio, tolerance

PADDING_VALUE = -3.5  # finite in every dtype; masked out, so it must change nothing
RATIO_BOUNDS = "ratio outside [1, max n_i]"
VECTORS = ("sequence_summed", "token_averaged")


def relation_kind(relation: str) -> str:
    """The failure kind of a relation that does not hold: each relation is a distinct bug."""
    return f"relation '{relation}' broken"


@dataclass(frozen=True)
class FirstCall:
    """What a relation starts from: the function, the case it ran on and the values it returned."""

    fn: Callable[..., Any]
    adapter: Framework
    case: Case
    values: dict[str, np.ndarray]
    precision: Precision

    def tolerance(self, case: Case | None = None) -> Tolerance:
        case = case or self.case
        return tolerance(exact(case), case.dtype, self.precision)

    def second_call(self, case: Case, relation: str) -> tuple[dict[str, np.ndarray] | None, Verdict]:
        """The function on a transformed case. If that call fails on its own, against the reference, the
        transformed case is the one to report: its snippet reproduces the failure without the first call
        (and it is the same kind of failure as a direct one, so the report shows it once)."""
        values, second = check_forward_values(self.fn, self.adapter, case, self.precision)
        verdict = Verdict()
        verdict.merge(second, prefix=f"{relation} (second call): ")
        if not verdict.ok:
            verdict.case = case.with_(story=(*case.story, ("derived by", relation)))
        return values, verdict


def _compare(relation: str, label: str, got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> Verdict:
    name = f"{relation}: {label}"
    ratios = error_ratio(got, want, tol)
    verdict = Verdict(error_ratios={name: float(np.max(ratios, initial=0.0))})
    if verdict.error_ratios[name] > 1:
        verdict.fail(
            relation_kind(relation),
            f"{name}: {np.array2string(np.asarray(got), threshold=6)} != "
            f"{np.array2string(np.asarray(want), threshold=6)} (err/tol = {verdict.error_ratios[name]:.3g})"
        )
    return verdict


def pad_with_masked_columns(first: FirstCall) -> Verdict:
    """Masked columns added at the end change nothing (the divisor is the selected count, not the width)."""
    relation, case = "pad with masked columns", first.case
    batch, tokens = case.shape
    extra = next_token_size(tokens) - tokens
    padded = case.with_(
        token_log_probs=np.hstack([case.token_log_probs, np.full((batch, extra), PADDING_VALUE)]),
        token_mask=np.hstack([case.token_mask, np.zeros((batch, extra), bool)]),
    )
    second, verdict = first.second_call(padded, relation)
    if second is not None:
        tol = first.tolerance()  # the padded case's exact values and tolerances are the same
        for key, got in second.items():
            verdict.merge(_compare(relation, key, got, first.values[key], 2 * tol.as_dict()[key]))
    return verdict


def permute_rows(first: FirstCall) -> Verdict:
    """Permuting the rows permutes the vectors and keeps the ratio (no row is special, no axis mixed up)."""
    relation, case = "permute rows", first.case
    batch, tokens = case.shape
    order = np.random.default_rng(batch * 7919 + tokens).permutation(batch)
    permuted = case.with_(token_log_probs=case.token_log_probs[order], advantages=case.advantages[order],
                          token_mask=case.token_mask[order])
    second, verdict = first.second_call(permuted, relation)
    if second is not None:
        tol, tol_second = first.tolerance(), first.tolerance(permuted)
        for key in VECTORS:
            bound = tol.as_dict()[key][order] + tol_second.as_dict()[key]
            verdict.merge(_compare(relation, key, second[key], first.values[key][order], bound))
        verdict.merge(_compare(relation, "magnitude_ratio", second["magnitude_ratio"], first.values["magnitude_ratio"],
                               tol.magnitude_ratio + tol_second.magnitude_ratio))
    return verdict


def split_the_batch(first: FirstCall) -> Verdict:
    """Two halves of the batch give the same vectors, and the ratio of their joined vectors is the ratio."""
    relation, case = "split the batch", first.case
    batch, _ = case.shape
    verdict = Verdict()
    if batch < 2:
        return verdict
    half = (batch + 1) // 2
    parts = []
    for rows in (slice(0, half), slice(half, batch)):
        part = case.with_(token_log_probs=case.token_log_probs[rows], advantages=case.advantages[rows],
                          token_mask=case.token_mask[rows])
        second, run_verdict = first.second_call(part, relation)
        verdict.merge(run_verdict)
        if second is None:
            return verdict
        parts.append(second)
    tol = first.tolerance()
    for key in VECTORS:
        joined = np.concatenate([part[key] for part in parts])
        verdict.merge(_compare(relation, key, joined, first.values[key], 2 * tol.as_dict()[key]))
    summed, averaged = (np.concatenate([part[key] for part in parts]) for key in VECTORS)
    denominator = np.abs(averaged).sum()
    joined_ratio = np.abs(summed).sum() / denominator if denominator > 0 else 0.0
    verdict.merge(_compare(relation, "magnitude_ratio from the chunks' vectors", np.asarray(joined_ratio),
                           first.values["magnitude_ratio"], 2 * tol.magnitude_ratio))
    return verdict


def scale_advantages(first: FirstCall) -> Verdict:
    """Scaling the advantages by 2 or -1, or negating every other row's, scales the vectors row by row and
    keeps the ratio: it is a ratio of sums of magnitudes (abs after the sum breaks it as soon as the signs
    differ)."""
    relation, case = "scale advantages", first.case
    verdict = Verdict()
    tol = first.tolerance()
    batch, _ = case.shape
    alternate = np.where(np.arange(batch) % 2 == 0, 1.0, -1.0)
    for label, factors in (("by 2", np.full(batch, 2.0)), ("by -1", np.full(batch, -1.0)),
                           ("by -1 every other row", alternate)):
        # powers of two and signs: exact, and within the magnitude bound's headroom; rows that now differ
        # cannot share one stride-0 row, so an expanded case is laid out contiguously
        layout = "contiguous" if case.layout == "expanded" and label.endswith("row") else case.layout
        scaled = case.with_(advantages=case.advantages * factors, layout=layout)
        second, run_verdict = first.second_call(scaled, relation)
        verdict.merge(run_verdict)
        if second is None:
            return verdict
        tol_second = first.tolerance(scaled)
        for key in VECTORS:
            bound = np.abs(factors) * tol.as_dict()[key] + tol_second.as_dict()[key]
            verdict.merge(_compare(relation, f"{label}: {key}", second[key], factors * first.values[key], bound))
        verdict.merge(_compare(relation, f"{label}: magnitude_ratio", second["magnitude_ratio"],
                               first.values["magnitude_ratio"], tol.magnitude_ratio + tol_second.magnitude_ratio))
    return verdict


TABLE: dict[str, Callable[[FirstCall], Verdict]] = {
    "pad with masked columns": pad_with_masked_columns,
    "permute rows": permute_rows,
    "split the batch": split_the_batch,
    "scale advantages": scale_advantages,
}
RELATIONS: tuple[str, ...] = tuple(TABLE)


def check_relation(
    relation: str, fn: Callable[..., Any], adapter: Framework, case: Case, values: dict[str, np.ndarray],
    precision: Precision = CONTRACT,
) -> Verdict:
    """Check one relation between `values` (fn on `case`) and fn on a transformed case."""
    if relation not in TABLE:
        raise ValueError(f"unknown relation {relation!r}")
    return TABLE[relation](FirstCall(fn, adapter, case, values, precision))


def check_ratio_bounds(case: Case, values: dict[str, np.ndarray], precision: Precision = CONTRACT) -> Verdict:
    """When the exact denominator is positive, 1 <= R <= max n_i, within tolerance."""
    expected = exact(case)
    verdict = Verdict()
    if expected.denominator == 0:
        return verdict
    tol = float(tolerance(expected, case.dtype, precision).magnitude_ratio)
    ratio = float(values["magnitude_ratio"])
    upper = float(expected.selected_counts.max())
    if not (1 - tol <= ratio <= upper + tol):
        verdict.fail(RATIO_BOUNDS, f"magnitude_ratio = {ratio!r} is outside [1, max n_i = {upper:g}] (tol {tol:.3g})")
    return verdict
