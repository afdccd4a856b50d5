"""Judging a sharded run: per-rank replies gathered into the whole batch's results, replicas checked for
agreement, then the one tolerance model (reference/tolerance.py) against reference() on the whole batch, as is:
summation order across ranks is just another summation order.

Gradients under torch.distributed: every rank backpropagates its slices of the cotangents, and a
replicated output gets its cotangent on every replica (a row's vectors on each of the row's `sequence`
ranks, the ratio on all `data * sequence` ranks). Autograd across ranks sums those contributions, so the
exact VJP is taken with the cotangents summed over the replicas: c_s and c_a times `sequence`, c_R times
`data * sequence` (powers of two: exact). Each token's log-prob lives on one rank, so its gradient is
compared as it is; a row's advantage is an input replicated over the sequence group, and how a correct
implementation distributes its gradient over the replicas is its own business, so the sum over the
replicas is compared. Under shard_map the function is one global function: its VJP is compared with the
exact VJP of the cotangents as given (JAX's transpose of psum accounts for the replication).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzz.checks import Failure, Verdict, compare_values
from fuzz.exact import exact as exact_results
from fuzz.gradients import GRADIENT_STRUCTURE, judge_gradients
from fuzz.sharded.split import Padded, Split
from impls.case import Case
from reference import OUTPUT_KEYS, Gradients
from reference.tolerance import Precision, tolerance

REPLICAS_DISAGREE = "replicas disagree"
PADDING_NOT_ZERO = "padding not exactly 0"


def replica_factors(split: Split) -> dict[str, int]:
    """How many replicas receive each output's cotangent under torch.distributed."""
    return {"sequence_summed": split.sequence, "token_averaged": split.sequence, "magnitude_ratio": split.world}


def summed_over_replicas(cotangents: dict[str, np.ndarray], split: Split) -> dict[str, np.ndarray]:
    factors = replica_factors(split)
    return {key: np.asarray(value, dtype=np.float64) * factors[key] for key, value in cotangents.items()}


def rank_failures(replies: list[dict[str, Any]], describe: Any) -> Verdict:
    """Each rank's own failures (an exception, wrong structure, modified inputs), named by rank."""
    verdict = Verdict()
    for rank, reply in enumerate(replies):
        prefix = f"{describe(rank)}: " if len(replies) > 1 else ""
        verdict.failures += [Failure(failure.kind, prefix + failure.message) for failure in reply["failures"]]
        if reply.get("traceback") and verdict.traceback is None:
            verdict.traceback = f"on {describe(rank)}:\n{reply['traceback']}"
    return verdict


def _disagreement(key: str, rows: slice, first: np.ndarray, other: np.ndarray, ranks: tuple[str, str]) -> str:
    differs = np.flatnonzero(~((first == other) | (np.isnan(first) & np.isnan(other))))
    where = int(differs[0]) if differs.size else 0
    index = "" if first.ndim == 0 else f"[{rows.start + where}]"
    a, b = (first, other) if first.ndim == 0 else (first[where], other[where])
    return (f"replicas disagree: {key}{index} is {float(a)!r} on {ranks[0]} and {float(b)!r} on {ranks[1]} "
            "(a replicated output must be the same on every replica)")


def gather_forward(case: Case, split: Split, replies: list[dict[str, Any]], describe: Any,
                   precision: Precision) -> Verdict:
    """torch.distributed forward: rank failures, replica agreement, then the gathered batch against the
    reference with the one tolerance model."""
    verdict = rank_failures(replies, describe)
    outputs = [reply.get("outputs") for reply in replies]
    if any(out is None for out in outputs):
        return verdict
    for rank, out in enumerate(outputs):  # shapes were checked on the rank; unusable ones stop here
        rows = split.rows(split.coordinates(rank)[0])
        if any(out[key].shape != (rows.stop - rows.start,) for key in OUTPUT_KEYS[:2]) or out[OUTPUT_KEYS[2]].shape:
            return verdict
    for rank, out in enumerate(outputs):
        d = split.coordinates(rank)[0]
        for key in OUTPUT_KEYS:
            first_rank = 0 if key == "magnitude_ratio" else d * split.sequence
            first = outputs[first_rank][key]
            if rank != first_rank and not np.array_equal(first, out[key], equal_nan=True):
                verdict.fail(REPLICAS_DISAGREE, _disagreement(key, split.rows(d), first, out[key],
                                                              (describe(first_rank), describe(rank))))
    gathered = {key: np.concatenate([outputs[d * split.sequence][key] for d in range(split.data)])
                for key in OUTPUT_KEYS[:2]}
    gathered["magnitude_ratio"] = outputs[0]["magnitude_ratio"]
    expected = exact_results(case)
    verdict.merge(compare_values(gathered, expected, tolerance(expected, case.dtype, precision), case.dtype))
    return verdict


def _padding_not_zero(name: str, values: np.ndarray, real: np.ndarray) -> list[Failure]:
    """Padded positions (fully masked rows, masked tokens) must be exactly 0; `real` marks the others."""
    bad = np.argwhere((values != 0) & ~real)
    if not bad.size:
        return []
    at = tuple(int(i) for i in bad[0])
    return [Failure(PADDING_NOT_ZERO, f"{name}{list(at)} = {float(values[at])!r} in the padding (masked, "
                                      "advantage 0), expected exactly 0")]


def judge_padded_forward(case: Case, padded: Padded, reply: dict[str, Any], precision: Precision) -> Verdict:
    """shard_map forward: padded rows exactly 0, the real rows cut out and judged against the reference of
    the unpadded case (padding must not widen the tolerance)."""
    verdict = rank_failures([reply], lambda rank: "the mesh")
    outputs = reply.get("outputs")
    if outputs is None:
        return verdict
    real_rows = np.zeros(padded.case.shape[0], bool)
    real_rows[padded.row_index] = True
    for key in OUTPUT_KEYS[:2]:
        verdict.failures += _padding_not_zero(key, outputs[key], real_rows)
    real = {key: outputs[key][padded.row_index] for key in OUTPUT_KEYS[:2]}
    real["magnitude_ratio"] = outputs["magnitude_ratio"]
    expected = exact_results(case)
    verdict.merge(compare_values(real, expected, tolerance(expected, case.dtype, precision), case.dtype))
    return verdict


def cut_padded_gradients(padded: Padded, gradients: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], Verdict]:
    """The real positions of shard_map's gradients, and failures for any padded position that is not 0."""
    verdict = Verdict()
    batch, tokens = padded.case.shape
    real_rows = np.zeros(batch, bool)
    real_rows[padded.row_index] = True
    real_tokens = np.zeros((batch, tokens), bool)
    real_tokens[np.ix_(padded.row_index, padded.token_index)] = True
    log_probs, advantages = gradients["d token_log_probs"], gradients["d advantages"]
    if log_probs.shape != (batch, tokens) or advantages.shape != (batch,):
        verdict.fail(GRADIENT_STRUCTURE, f"gradients have shapes {log_probs.shape} and {advantages.shape}, "
                                         f"expected {(batch, tokens)} and {(batch,)}")
        return {}, verdict
    verdict.failures += _padding_not_zero("d token_log_probs", log_probs, real_tokens)
    verdict.failures += _padding_not_zero("d advantages", advantages, real_rows)
    return {"d token_log_probs": log_probs[np.ix_(padded.row_index, padded.token_index)],
            "d advantages": advantages[padded.row_index]}, verdict


def compare_gradients(case: Case, gradients: dict[str, np.ndarray], exact: Gradients,
                      cotangents: dict[str, np.ndarray], precision: Precision) -> Verdict:
    """Gathered gradients against the exact VJP, judged as single-process ones are (fuzz/gradients.py).
    `cotangents` are the ones the exact VJP was taken with (summed over replicas under torch)."""
    return judge_gradients(case, gradients, exact, cotangents, precision)


def gather_gradients(case: Case, split: Split, replies: list[dict[str, Any]], describe: Any) -> tuple[
        dict[str, np.ndarray] | None, Verdict]:
    """torch.distributed VJP: each rank's log-prob gradient block placed where its tokens are, each row's
    advantage gradient summed over the row's replicas (in float64, from values in the input dtype)."""
    verdict = rank_failures(replies, describe)
    if any(set(reply.get("gradients", {})) != {"d token_log_probs", "d advantages"} for reply in replies):
        return None, verdict
    batch, tokens = case.shape
    log_probs, advantages = np.zeros((batch, tokens)), np.zeros(batch)
    for rank, reply in enumerate(replies):
        d, q = split.coordinates(rank)
        rows, columns = split.rows(d), split.tokens(q)
        got_lp, got_adv = reply["gradients"]["d token_log_probs"], reply["gradients"]["d advantages"]
        want_lp = (rows.stop - rows.start, columns.stop - columns.start)
        if got_lp.shape != want_lp or got_adv.shape != (rows.stop - rows.start,):
            verdict.fail(GRADIENT_STRUCTURE, f"{describe(rank)}: gradients have shapes {got_lp.shape} and "
                                             f"{got_adv.shape}, expected {want_lp} and {want_lp[:1]}")
            return None, verdict
        log_probs[rows, columns] = got_lp
        advantages[rows] += got_adv
    return {"d token_log_probs": log_probs, "d advantages": advantages}, verdict
