"""Judging a sharded run: per-rank replies gathered into the whole batch's results, replicas checked for
agreement, then the one tolerance model against the exact results of the whole batch, as is: summation
order across ranks is just another summation order.

Gradients under torch.distributed: every rank backpropagates its slices of the cotangents, and a
replicated output gets its cotangent on every replica (the contract's `Output.replicated` axes). Autograd
across ranks sums those contributions, so the exact VJP is taken with the cotangents summed over the
replicas (times the number of replicas: powers of two, exact). Each per-token input lives on one rank, so its
gradient is compared as it is; a per-row input is replicated over the sequence group, and how a correct
implementation distributes its gradient over the replicas is its own business, so the sum over the replicas
is compared. Under shard_map the function is one global function: its VJP is compared with the exact VJP of
the cotangents as given (JAX's transpose of psum accounts for the replication).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fuzz.engines.split import Padded, Split, output_block
from fuzz.judge.forward import compare_values
from fuzz.judge.gradients import judge_gradients
from fuzz.judge.outputs import GRADIENT_STRUCTURE, ReadBack
from fuzz.judge.verdict import Failure, Verdict
from reference.case import Case
from reference.dtypes import DTYPE_NAMES
from reference.tolerance import Precision, ulp_error

REPLICAS_DISAGREE = "replicas disagree"
PADDING_NOT_ZERO = "padding not exactly 0"
Describe = Callable[[int], str]


def replica_count(axes: tuple[str, ...], split: Split) -> int:
    """How many ranks hold one replica of a value replicated over `axes`."""
    return int(np.prod([split.data if axis == "data" else split.sequence for axis in axes]))


def summed_over_replicas(case: Case, cotangents: dict[str, np.ndarray], split: Split) -> dict[str, np.ndarray]:
    """The cotangents the exact VJP is taken with under torch.distributed: each times its replicas' count."""
    return {spec.name: np.asarray(cotangents[spec.name], dtype=np.float64) * replica_count(spec.replicated, split)
            for spec in case.contract.outputs}


def rank_failures(replies: list[dict[str, Any]], describe: Describe) -> Verdict:
    """Each rank's own failures (an exception, wrong structure, modified inputs), named by rank."""
    verdict = Verdict()
    for rank, reply in enumerate(replies):
        prefix = f"{describe(rank)}: " if len(replies) > 1 else ""
        verdict.failures += [Failure(failure.kind, prefix + failure.message) for failure in reply["failures"]]
        if reply.get("traceback") and verdict.traceback is None:
            verdict.traceback = f"on {describe(rank)}:\n{reply['traceback']}"
    return verdict


def _first_replica(split: Split, rank: int, axes: tuple[str, ...]) -> int:
    """The lowest rank holding the same replica as `rank` of a value replicated over `axes`."""
    d, q = split.coordinates(rank)
    return (0 if "data" in axes else d) * split.sequence + (0 if "sequence" in axes else q)


ROUNDING_ULPS = 8  # replicas this close computed the same value, each rounding it its own way


def _disagreement(key: str, first: np.ndarray, other: np.ndarray, ranks: tuple[str, str], dtype: str) -> str:
    differs = np.flatnonzero(~((first == other) | (np.isnan(first) & np.isnan(other))))
    where = int(differs[0]) if differs.size else 0
    index = "" if first.ndim == 0 else f"[{where}] of the rank's rows"
    a, b = (first, other) if first.ndim == 0 else (first.flat[where], other.flat[where])
    message = (f"replicas disagree: {key}{index} is {float(a)!r} on {ranks[0]} and {float(b)!r} on {ranks[1]} "
               "(a replicated output must be the same on every replica)")
    ulps = float(ulp_error(b, a, dtype, abs(float(b)))) if dtype in DTYPE_NAMES else np.inf
    if ulps <= ROUNDING_ULPS:  # a rounding apart, not a different formula: say how such values arise
        message += (f": {ulps:.3g} ulp of {dtype} apart, each rank rounding it its own way (a value rebuilt from a "
                    "rank's own part, as local + (total - local).detach(), rounds differently on each rank: return the "
                    "all-reduced value itself)")
    return message


def gather_forward(case: Case, split: Split, replies: list[dict[str, Any]], describe: Describe,
                   precision: Precision) -> Verdict:
    """torch.distributed forward: rank failures, replica agreement, then the gathered batch against the
    exact results with the one tolerance model."""
    contract = case.contract
    verdict = rank_failures(replies, describe)
    outputs = [reply.get("outputs") for reply in replies]
    if any(out is None for out in outputs):  # a rank's structure failed: reported above, nothing to gather
        return verdict
    for rank, out in enumerate(outputs):
        for spec in contract.outputs:
            first_rank = _first_replica(split, rank, spec.replicated)
            first = outputs[first_rank][spec.name]
            if rank != first_rank and not np.array_equal(first, out[spec.name], equal_nan=True):
                verdict.fail(REPLICAS_DISAGREE, _disagreement(spec.name, first, out[spec.name],
                                                              (describe(first_rank), describe(rank)),
                                                              replies[rank]["dtypes"][spec.name]))
    gathered, dtypes = {}, {}
    for spec in contract.outputs:
        holders = sorted({_first_replica(split, rank, spec.replicated) for rank in range(split.world)})
        parts = [outputs[rank][spec.name] for rank in holders]
        gathered[spec.name] = np.concatenate(parts) if spec.dims else parts[0]
        dtypes[spec.name] = replies[holders[0]]["dtypes"][spec.name]
    explain_split = contract.explain_split
    verdict.merge(compare_values(ReadBack(gathered, dtypes), case, precision, explain_split and (
        lambda case, values: explain_split(case, split.row_cuts, split.token_cuts, values))))
    return verdict


def _padding_not_zero(name: str, values: np.ndarray, real: np.ndarray) -> list[Failure]:
    """Padded positions (fully masked rows, masked tokens) must be exactly 0; `real` marks the others."""
    bad = np.argwhere((values != 0) & ~real)
    if not bad.size:
        return []
    at = tuple(int(i) for i in bad[0])
    return [Failure(PADDING_NOT_ZERO, f"{name}{list(at)} = {float(values[at])!r} in the padding (masked, fully "
                                      "masked rows), expected exactly 0")]


def judge_padded_forward(case: Case, padded: Padded, split: Split, reply: dict[str, Any], precision: Precision
                         ) -> Verdict:
    """shard_map forward: padded rows exactly 0, the real rows cut out and judged against the exact results of
    the unpadded case (padding must not widen the tolerance)."""
    verdict = rank_failures([reply], lambda rank: "the mesh")
    outputs = reply.get("outputs")
    if outputs is None:
        return verdict
    real = {}
    for spec in case.contract.outputs:
        if spec.dims:
            verdict.failures += _padding_not_zero(spec.name, outputs[spec.name], padded.real(spec.dims))
            real[spec.name] = outputs[spec.name][padded.index(spec.dims)]
        else:
            real[spec.name] = outputs[spec.name]
    verdict.merge(compare_values(ReadBack(real, reply["dtypes"]), case, precision,
                                 _explained_as_given(padded, split), given=padded.case))
    return verdict


def _explained_as_given(padded: Padded, split: Split) -> Callable[[Case, dict[str, np.ndarray]], str | None] | None:
    """A wrong value explained on the padded batch the function was given, on its equal shards (the mistakes of
    combining them first, where the contract has them), where padding changed its shape: a mistake of the function
    is one on what it sees (a padded row counted as a row, the padded width taken for a length); else, or where
    nothing matches there, on the case as drawn."""
    contract = padded.case.contract
    if contract.explain is None:
        return None
    rows, tokens = padded.case.shape
    even = split.evenly(rows, tokens)

    def on_equal_shards(case: Case, values: dict[str, np.ndarray]) -> str | None:
        if contract.explain_split is None:
            return contract.explain(case, values)
        return contract.explain_split(case, even.row_cuts, even.token_cuts, values)

    def on_what_it_was_given(case: Case, values: dict[str, np.ndarray]) -> str | None:
        if padded.case.shape == case.shape:  # nothing padded, or the padded batch is the case judged
            return on_equal_shards(case, values)
        if named := on_equal_shards(padded.case, values):
            return (f"on the batch shard_map is given, padded to {rows} x {tokens} with fully masked rows and "
                    f"masked tokens, {named}")
        return contract.explain(case, values)

    return on_what_it_was_given


def cut_padded_gradients(case: Case, padded: Padded, gradients: dict[str, np.ndarray]) -> tuple[
        dict[str, np.ndarray], Verdict]:
    """The real positions of shard_map's gradients, and failures for any padded position that is not 0."""
    verdict, real = Verdict(), {}
    for spec in case.contract.differentiable_inputs:
        name, shape = f"d {spec.name}", tuple(padded.case.sizes[dim] for dim in spec.dims)
        got = gradients[name]
        if got.shape != shape:
            verdict.fail(GRADIENT_STRUCTURE, f"{name} has shape {got.shape}, expected {shape}")
            return {}, verdict
        verdict.failures += _padding_not_zero(name, got, padded.real(spec.dims))
        real[name] = got[padded.index(spec.dims)]
    return real, verdict


def gather_gradients(case: Case, split: Split, replies: list[dict[str, Any]], describe: Describe) -> tuple[
        dict[str, np.ndarray] | None, Verdict]:
    """torch.distributed VJP: each rank's gradient block of a per-token input placed where its tokens are; a
    per-row input's gradient summed over the row's replicas (in float64, from values in the input dtype)."""
    contract = case.contract
    verdict = rank_failures(replies, describe)
    names = {f"d {spec.name}" for spec in contract.differentiable_inputs}
    if any(set(reply.get("gradients", {})) != names for reply in replies):
        return None, verdict
    gathered = {f"d {spec.name}": np.zeros(tuple(case.sizes[dim] for dim in spec.dims))
                for spec in contract.differentiable_inputs}
    for rank, reply in enumerate(replies):
        d, q = split.coordinates(rank)
        for spec in contract.differentiable_inputs:
            name = f"d {spec.name}"
            block = tuple(split.rows(d) if axis == "data" else split.tokens(q) for axis in spec.mesh)
            got = reply["gradients"][name]
            shape = tuple(s.stop - s.start for s in block)
            if got.shape != shape:
                verdict.fail(GRADIENT_STRUCTURE, f"{describe(rank)}: {name} has shape {got.shape}, expected {shape}")
                return None, verdict
            gathered[name][block] += got  # a per-token block is on one rank; a per-row one sums its replicas
    return gathered, verdict


def compare_gradients(case: Case, gradients: dict[str, np.ndarray], exact: Any, cotangents: dict[str, np.ndarray],
                      precision: Precision, split: Split | None = None) -> Verdict:
    """Gathered gradients against the exact VJP, judged as single-process ones are (fuzz/judge/gradients.py).
    `cotangents` are the ones the exact VJP was taken with (summed over replicas under torch). With the `split`
    of torch.distributed ranks, a gradient that is the exact one over a group's size is named first."""
    return judge_gradients(case, gradients, exact, cotangents, precision,
                           before=None if split is None else _a_rank_share(split))


# collectives autograd does not see: a gradient that flows back through none of them is each rank's own share
NO_GRADIENT_BACK = ("the all-reduce carries no gradient back (a plain torch.distributed.all_reduce, or local + (total "
                    "- local).detach(), where a differentiable one is needed: torch.distributed.nn.functional's, or "
                    "_functional_collectives'): each rank backpropagates its own share only?")


def _a_rank_share(split: Split) -> Callable[[np.ndarray, np.ndarray, np.ndarray], str | None]:
    """A gradient that is, wherever the exact one is not 0, the exact one over the size of every rank, the
    sequence group or the data group: the replicas' cotangents never summed back."""
    groups = ((split.world, "the number of ranks"), (split.sequence, "the sequence group's size"),
              (split.data, "the data group's size"))

    def explain(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> str | None:
        if not np.any(want != 0):
            return None
        for size, over in dict((size, over) for size, over in reversed(groups) if size > 1).items():
            if np.all(np.abs(got - want / size) <= 2 * bound) and np.any(np.abs(want - want / size) > bound):
                return f"it is 1/{size} of the exact gradient ({size}: {over}): {NO_GRADIENT_BACK}"
        return None

    return explain


def rank_cotangents(case: Case, cotangents: dict[str, np.ndarray], split: Split, rank: int) -> dict[str, np.ndarray]:
    """The part of each output's cotangent a rank backpropagates: its rows' slice of a per-row output, all of a
    scalar."""
    return {spec.name: np.asarray(cotangents[spec.name])[output_block(split, rank, spec.dims)]
            for spec in case.contract.outputs}
