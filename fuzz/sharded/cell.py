"""One sharded cell under Hypothesis: every example draws a contiguous Case of the subject's contract
(fuzz/judge/draws.py) and a split of it over the cell's mesh (fuzz/sharded/split.py), runs it on the cell's
engine (fuzz/sharded/engines.py) and judges the gathered result (fuzz/sharded/judge.py). The cell reuses the
one Hypothesis loop (fuzz/run/cell.py) with its own example check, and its bugs' snippets launch the ranks.

A rank that dies or hangs (RankFailure) fails the example with the message naming the rank; as the pool is
gone, every later example of the cell (Hypothesis' shrinking included) fails at once with the same message
and the case that did it, so a dead rank costs one timeout, not one per shrink step.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from fuzz.judge.draws import draw_cotangents
from fuzz.judge.subject import Subject
from fuzz.judge.verdict import Verdict
from fuzz.report.results import Bug, CellResult
from fuzz.run.cell import fuzz_cell
from fuzz.run.plan import CellTask
from fuzz.run.subjects import SubjectSpec, available_adapter
from fuzz.sharded.engines import Engine, engine_named
from fuzz.sharded.judge import compare_gradients, summed_over_replicas
from fuzz.sharded.split import Split, draw_split
from fuzz.sharded.torch_ranks import RankFailure
from reference.case import Case
from reference.exact import exact_results
from reference.tolerance import PRECISIONS, STRICT

RANK_FAILED = "a rank died or hung"


def subject_key(spec: SubjectSpec) -> tuple[str, str]:
    """How a rank finds the function: ("builtin", name), or ("target", TARGET) with a file's absolute path, so
    that ranks and workers load it from anywhere."""
    if spec.framework is None:
        return "builtin", spec.name
    location, _, name = spec.name.rpartition(":")
    if location.endswith(".py") or os.sep in location:
        return "target", f"{os.path.abspath(location)}:{name}"
    return "target", spec.name


@functools.cache
def sharded_subject(spec: SubjectSpec, engine_name: str) -> Subject:
    """What the cell needs of the function (its name, imports, contract, precision): it runs on the ranks."""
    engine = engine_named(engine_name)
    adapter = available_adapter(engine.framework)
    contract = spec.bound_contract
    if spec.framework is None:
        from impls.registry import get_implementation

        function = get_implementation(spec.name).function
        return Subject(spec.name, function, adapter, contract, (f"from {function.__module__} import "
                       f"{function.__name__}",), function.__name__, precision=STRICT)
    from fuzz.loader import load_target

    target = load_target(spec.name)
    return Subject(spec.name, target.function, adapter, contract, target.import_lines, target.function_name,
                   precision=PRECISIONS[spec.precision], masked_values=spec.masked_values)


@dataclass
class _Failing:
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


def _example(task: CellTask, engine: Engine, subject: Subject, state: dict[str, Any], case: Case,
             data: st.DataObject) -> Verdict:
    """One sharded example: draw the split (and cotangents), run every rank, judge the gathered result."""
    story: list[tuple[str, object]] = []
    case, split = draw_split(_labelled(data, story), case, [task.mesh])
    case = case.with_(story=case.story + tuple(story))
    cotangents = exact_cotangents = exact = None
    if task.check == "gradients":
        cotangents = draw_cotangents(data, case)
        exact_cotangents = summed_over_replicas(case, cotangents, split) if engine.replicas_sum_cotangents \
            else cotangents
        exact = case.contract.vjp(case, exact_cotangents, exact_results(case))
    if state.get("fatal"):  # after the draws: Hypothesis needs every example to draw alike
        verdict = Verdict()
        verdict.fail(RANK_FAILED, state["fatal"].failures[0])
        verdict.case = state["fatal"].case
        return verdict
    try:
        gradients, verdict = engine.run(subject_key(task.subject), case, split, cotangents, subject.precision)
        if gradients is not None:
            verdict.merge(compare_gradients(case, gradients, exact, exact_cotangents, subject.precision))
    except RankFailure as error:
        state["fatal"] = _Failing(case, split, cotangents, [str(error)])
        verdict = Verdict()
        verdict.fail(RANK_FAILED, str(error))
    verdict.cotangents = exact_cotangents
    verdict.case = case
    if not verdict.ok:  # every failing example, by its case: each distinct bug's snippet is rendered from it
        state.setdefault("failing", {})[id(case)] = _Failing(case, split, cotangents,
                                                             [str(failure) for failure in verdict.failures])
    return verdict


def run_sharded_cell(task: CellTask) -> CellResult:
    """Fuzz one sharded cell (in this process; its engine's ranks are processes of their own)."""
    engine = engine_named(task.engine or "")
    subject = sharded_subject(task.subject, engine.name)
    state: dict[str, Any] = {}

    def bug(subject: Subject, case: Case, verdict: Verdict) -> Bug:
        failing = state["failing"][id(case)]
        snippet = engine.snippet(subject, failing.case, failing.split, failing.cotangents, failing.failures)
        return Bug(verdict.kind, [str(failure) for failure in verdict.failures], case, snippet, verdict.traceback)

    return fuzz_cell(subject, dtype=task.dtype, device=task.device, layouts=("contiguous",),
                     max_examples=task.examples, seed=task.seed, check=task.row,
                     example_check=lambda subject, case, data: _example(task, engine, subject, state, case, data),
                     bug=bug)
