"""One sharded cell under Hypothesis, and the plan of sharded cells.

A cell is (subject, engine, mesh, device, dtype, check): every example draws a contiguous Case
(fuzz/strategies.draw_case) and a split of it over the cell's mesh (fuzz/sharded/split.py), runs it on
the engine's ranks and judges the gathered result (fuzz/sharded/judge.py). The cell reuses
fuzz.campaign.fuzz_cell (the Hypothesis loop, shrinking, the result) through its `example_check` hook and
then replaces the single-process snippet with one that launches the ranks itself.

A rank that dies or hangs (RankFailure) fails the example with the message naming the rank; as the pool
is gone, every later example of the cell (Hypothesis' shrinking included) fails at once with the same
message and the case that did it, so a dead rank costs one timeout, not one per shrink step.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from fuzz.campaign import CellResult, Subject, fuzz_cell
from fuzz.checks import Verdict
from fuzz.exact import exact as exact_results
from fuzz.gradients import draw_cotangents
from fuzz.sharded.judge import (
    compare_gradients,
    cut_padded_gradients,
    gather_forward,
    gather_gradients,
    judge_padded_forward,
    rank_failures,
    summed_over_replicas,
)
from fuzz.sharded.split import MESHES, Padded, Split, draw_split, mesh_name, pad_cotangents, pad_for_shard_map, shard
from fuzz.sharded.torch_ranks import RankFailure
from impls.case import Case
from reference import complete_cotangents, vjp
from reference.tolerance import CONTRACT, PRECISIONS, STRICT

ENGINES = ("torch", "jax", "jax-plain")  # jax-plain: a single-process function under jit, inputs sharded


@dataclass(frozen=True)
class ShardedTask:
    """One sharded cell: `name` is a built-in or a user's TARGET (`builtin` False)."""

    name: str
    engine: str
    mesh: tuple[int, int]
    device: str
    dtype: str
    check: str  # "forward" or "gradients"
    examples: int
    seed: int
    builtin: bool = True
    precision: str = CONTRACT.name  # a user's function's (built-ins are held to their strict promise)

    @property
    def row(self) -> str:
        """The matrix row's check column: one row per mesh shape (and check)."""
        kind = "sharded inputs" if self.engine == "jax-plain" else "sharded"
        return f"{kind} {mesh_name(self.mesh)}" + (" gradients" if self.check == "gradients" else "")

    @property
    def subject_key(self) -> tuple[str, str]:
        return ("builtin", self.name) if self.builtin else ("target", _absolute_target(self.name))


def _absolute_target(spec: str) -> str:
    """A file TARGET as an absolute path, so that ranks and workers load it from anywhere."""
    location, _, name = spec.rpartition(":")
    if location.endswith(".py") or os.sep in location:
        return f"{os.path.abspath(location)}:{name}"
    return spec


def plan_sharded_cells(name: str, engine: str, dtypes: list[str], devices: list[str], examples: int, seed: int,
                       gradients: bool, gradient_examples: int, builtin: bool = True,
                       meshes: tuple[tuple[int, int], ...] = MESHES,
                       precision: str = CONTRACT.name) -> list[ShardedTask]:
    """Every (mesh, device, check, dtype) cell of one subject; forward cells first."""
    checks = [("forward", examples)] + ([("gradients", gradient_examples)] if gradients else [])
    return [ShardedTask(name, engine, mesh, device, dtype, check, count, mesh_seed(seed, mesh), builtin, precision)
            for check, count in checks for mesh in meshes for device in devices for dtype in dtypes]


def mesh_seed(seed: int, mesh: tuple[int, int]) -> int:
    """The Hypothesis seed of a mesh's cells: each mesh draws cases of its own. With `seed` for every mesh, the
    six meshes of a dtype ran the same cases (a few each in the campaign: its matrix showed four meshes with
    the same figures), so five of them added splits but no new data. Still a function of `seed` alone (distinct
    for distinct seeds and meshes, as meshes have at most 9 data and 9 sequence ranks), so a run repeats."""
    data, sequence = mesh
    return seed * 100 + data * 10 + sequence


RANK_FAILED = "a rank died or hung"


@dataclass
class _Failure:
    """What a failing example ran: enough to render its snippet."""

    case: Case
    split: Split
    cotangents: dict[str, np.ndarray] | None = None
    failures: list[str] = field(default_factory=list)


def _labelled(data: st.DataObject, story: list[tuple[str, object]]) -> Any:
    def draw(strategy: st.SearchStrategy, label: str) -> Any:
        value = data.draw(strategy, label=label)
        story.append((label, value))
        return value

    return draw


def _torch_jobs(task: ShardedTask, case: Case, split: Split,
                cotangents: dict[str, np.ndarray] | None) -> list[dict[str, Any]]:
    jobs = []
    for rank in range(split.world):
        piece = shard(case, split, rank)
        rows = split.rows(split.coordinates(rank)[0])
        job = {"subject": task.subject_key, "mesh": split.mesh, "dtype": case.dtype, "device": case.device,
               "token_log_probs": piece.token_log_probs, "advantages": piece.advantages,
               "token_mask": piece.token_mask}
        if cotangents is not None:
            job["cotangents"] = {"sequence_summed": cotangents["sequence_summed"][rows],
                                 "token_averaged": cotangents["token_averaged"][rows],
                                 "magnitude_ratio": cotangents["magnitude_ratio"]}
        jobs.append(job)
    return jobs


def _global_job(task: ShardedTask, padded: Padded, cotangents: dict[str, np.ndarray] | None) -> dict[str, Any]:
    """The padded global case for the JAX worker; padded rows get cotangent 0 (their gradients are 0 anyway)."""
    case = padded.case
    job = {"subject": task.subject_key, "mesh": task.mesh, "dtype": case.dtype,
           "mode": "plain" if task.engine == "jax-plain" else "shard_map",
           "token_log_probs": case.token_log_probs, "advantages": case.advantages, "token_mask": case.token_mask}
    if cotangents is not None:
        job["cotangents"] = pad_cotangents(padded, cotangents)
    return job


def _example(task: ShardedTask, subject: Subject, state: dict[str, Any], case: Case, data: st.DataObject) -> Verdict:
    """One sharded example: draw the split (and cotangents), run every rank, judge the gathered result."""
    story: list[tuple[str, object]] = []
    case, split = draw_split(_labelled(data, story), case, [task.mesh])
    case = case.with_(story=case.story + tuple(story))
    padded = pad_for_shard_map(case, split) if task.engine != "torch" else None
    cotangents = None
    if task.check == "gradients":
        cotangents = complete_cotangents(draw_cotangents(data, case), case.shape[0])
        exact_cotangents = summed_over_replicas(cotangents, split) if task.engine == "torch" else cotangents
        exact = vjp(case.token_log_probs, case.advantages, case.token_mask, exact_cotangents, exact_results(case))
    if state.get("fatal"):  # after the draws: Hypothesis needs every example to draw alike
        verdict = Verdict()
        verdict.fail(RANK_FAILED, state["fatal"].failures[0])
        verdict.case = state["fatal"].case
        return verdict
    try:
        if task.engine == "torch":
            from fuzz.sharded.torch_ranks import pool_for

            replies = pool_for(split.world, case.device).run(_torch_jobs(task, case, split, cotangents),
                                                              split.describe)
            if cotangents is None:
                verdict = gather_forward(case, split, replies, split.describe, subject.precision)
            else:
                gradients, verdict = gather_gradients(case, split, replies, split.describe)
                if gradients is not None:
                    verdict.merge(compare_gradients(case, gradients, exact, exact_cotangents, subject.precision))
        else:
            from fuzz.sharded.jax_worker import jax_worker

            reply = jax_worker().run(_global_job(task, padded, cotangents))
            if cotangents is None:
                verdict = judge_padded_forward(case, padded, reply, subject.precision)
            else:
                verdict = rank_failures([reply], lambda rank: "the mesh")
                if "gradients" in reply:
                    gradients, cut = cut_padded_gradients(padded, reply["gradients"])
                    verdict.merge(cut)
                    if gradients:
                        verdict.merge(compare_gradients(case, gradients, exact, exact_cotangents, subject.precision))
    except RankFailure as error:
        state["fatal"] = _Failure(case, split, cotangents, [str(error)])
        verdict = Verdict()
        verdict.fail(RANK_FAILED, str(error))
    if cotangents is not None:
        verdict.cotangents = exact_cotangents
    verdict.case = case
    if not verdict.ok:  # every failing example, by its case: each distinct bug's snippet is rendered from it
        state.setdefault("failing", {})[id(case)] = _Failure(case, split, cotangents,
                                                             [str(failure) for failure in verdict.failures])
    return verdict


def build_subject(task: ShardedTask) -> Subject:
    """The fuzz_cell subject: its name, adapter and import lines (the function itself runs on the ranks)."""
    from impls.frameworks import load_framework

    adapter = load_framework("torch" if task.engine == "torch" else "jax")
    if task.builtin:
        from impls.registry import get_implementation

        function = get_implementation(task.name).function
        return Subject(task.name, function, adapter, (f"from {function.__module__} import {function.__name__}",),
                       function.__name__, precision=STRICT)
    from fuzz.loader import load_target

    target = load_target(task.name)
    return Subject(task.name, target.function, adapter, target.import_lines, target.function_name,
                   precision=PRECISIONS[task.precision])


def run_sharded_cell(task: ShardedTask, subject: Subject | None = None) -> CellResult:
    """Fuzz one sharded cell and print a progress line for it."""
    from fuzz.sharded.snippets import render_sharded_snippet

    subject = subject or build_subject(task)
    state: dict[str, Any] = {}
    cell = fuzz_cell(subject, dtype=task.dtype, device=task.device, layouts=("contiguous",),
                     max_examples=task.examples, seed=task.seed, check=task.row,
                     example_check=lambda subject, case, data: _example(task, subject, state, case, data))
    failing = state.get("failing", {})
    for bug in cell.bugs:  # each distinct bug's snippet launches the ranks itself
        failure = failing.get(id(bug.case))
        if failure is not None:
            bug.snippet = render_sharded_snippet(task, subject, failure.case, failure.split, failure.cotangents,
                                                 failure.failures)
    status = "ok" if cell.ok else f"FAIL ({len(cell.bugs)} distinct)"
    print(f"  {task.row} of {subject.name} on {task.device} in {task.dtype}: {status}, {cell.examples} examples, "
          f"worst err/tol {cell.worst:.3g}, {cell.worst_ulps:.3g} ulp, {cell.seconds:.1f} s",
          file=sys.stderr, flush=True)
    return cell


def run_sharded_cells(tasks: list[ShardedTask], fail_fast: bool = False) -> list[CellResult]:
    """The cells one after another in this process: the ranks are the parallelism (and the cores' load)."""
    results = []
    subjects: dict[tuple[str, str, bool], Subject] = {}
    for task in tasks:
        key = (task.name, task.engine, task.builtin)
        if key not in subjects:
            subjects[key] = build_subject(task)
        results.append(run_sharded_cell(task, subjects[key]))
        if fail_fast and not results[-1].ok:
            break
    return results
