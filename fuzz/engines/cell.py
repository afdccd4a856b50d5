"""One engine's cell under Hypothesis: every example draws a contiguous Case of the subject's contract
(fuzz/judge/draws.py) and a split of it over the cell's shape (a mesh, or ranks and micro-batches: the engine
draws it), runs it on the cell's engine (fuzz/engines/registry.py), which judges the combined result. The cell
reuses the one Hypothesis loop (fuzz/run/cell.py) with its own example check, and its bugs' snippets are the
engine's (they launch their own ranks).

A rank that dies or hangs (RankFailure) fails the example with the message naming the rank; as the pool is
gone, every later example of the cell (Hypothesis' shrinking included) fails at once with the same message
and the case that did it, so a dead rank costs one timeout, not one per shrink step.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis import target

from fuzz.engines.chunks import uneven_chunks
from fuzz.engines.registry import Engine, engine_named
from fuzz.engines.torch_ranks import RankFailure
from fuzz.judge.anchors import MIXED_COUNTS, AnchorDraws, fixed_cases
from fuzz.judge.draws import draw_case, draw_cotangents, drawer
from fuzz.judge.subject import Subject
from fuzz.judge.verdict import STRUCTURE, Verdict
from fuzz.report.callee import snippet_under_free_name
from fuzz.report.results import Bug, CellResult
from fuzz.run.calls import CallTimedOut, Watcher
from fuzz.run.cell import ambiguous, fuzz_cell, with_fewer_causes
from fuzz.run.interrupted import TIMEOUT, interrupted_cell, timed_out_in_process
from fuzz.run.plan import CellTask
from fuzz.run.processes import DidNotStart
from fuzz.run.subjects import SubjectSpec, available_adapter, build_subject, snippet_source, watch_subject
from reference.case import Case
from reference.exact import exact_results
from reference.tolerance import PRECISIONS, STRICT

RANK_FAILED = "a rank died or hung"


def subject_key(spec: SubjectSpec) -> tuple[str, str]:
    """How a rank finds the function: ("builtin", "contract:name"), or ("target", TARGET) with a file's absolute
    path, so that ranks and workers load it from anywhere."""
    if spec.framework is None:
        return "builtin", f"{spec.contract}:{spec.name}"
    location, _, name = spec.name.rpartition(":")
    if location.endswith(".py") or os.sep in location:
        return "target", f"{os.path.abspath(location)}:{name}"
    return "target", spec.name


@functools.cache
def engine_subject(spec: SubjectSpec, engine_name: str) -> Subject:
    """What the cell needs of the function: for an engine in this process, the subject `check` builds (compiled
    where its mode says so); for one on ranks, its name, imports, contract and precision (it runs there)."""
    engine = engine_named(engine_name)
    if engine.in_process:
        return replace(build_subject(spec), key=subject_key(spec))
    adapter = available_adapter(engine.framework)
    contract = spec.bound_contract
    if spec.framework is None:  # a built-in: fuzzed in every binding of its declared parameters, unless told one
        from impls.registry import get_implementation

        implementation = get_implementation(spec.name, spec.contract)
        function = implementation.function_for(contract)
        draws = bool(contract.parameter_menu) and not spec.parameters
        return Subject(spec.name, function, adapter, contract, (f"from {function.__module__} import "
                       f"{function.__name__}",), function.__name__, precision=STRICT, key=subject_key(spec),
                       bind=implementation.function_for if contract.parameters else None, draws_parameters=draws,
                       compiled=engine.compiles)
    from fuzz.loader import load_target

    target = load_target(spec.name)
    import_lines, function_name = spec.binding or (target.import_lines, target.function_name)
    return Subject(spec.name, target.function, adapter, contract, import_lines, function_name,
                   precision=PRECISIONS[spec.precision], masked_values=spec.masked_values, key=subject_key(spec),
                   compiled=engine.compiles)


@dataclass
class _Failing:
    """What a failing example ran: enough to render its snippet."""

    case: Case
    split: Any
    cotangents: dict[str, np.ndarray] | None = None
    failures: list[str] = field(default_factory=list)


def _labelled(data: st.DataObject, story: list[tuple[str, object]]) -> Any:
    choose = drawer(data)

    def draw(strategy: st.SearchStrategy, label: str) -> Any:
        value = choose(strategy, label)
        story.append((label, value))
        return value

    return draw


def _example(task: CellTask, engine: Engine, subject: Subject, state: dict[str, Any], case: Case,
             data: st.DataObject) -> Verdict:
    """One example: draw the split (and cotangents), run it on the engine, which judges the combined result."""
    story: list[tuple[str, object]] = []
    case, split = engine.fit(subject, *engine.draw_split(_labelled(data, story), case, task.mesh))
    case = case.with_(story=case.story + tuple(story))
    target(float(split.active(case)), label="parts holding selected tokens")  # toward splits that carry something
    cotangents = exact_cotangents = exact = None
    if task.check == "gradients":
        cotangents = draw_cotangents(data, case, emphasis="splits")
        exact_cotangents = engine.exact_cotangents(case, cotangents, split)
        exact = case.contract.vjp(case, exact_cotangents, exact_results(case))
    if state.get("fatal"):  # after the draws: Hypothesis needs every example to draw alike
        return replace(state["fatal"], failures=list(state["fatal"].failures))  # with the case that did it
    try:
        verdict = engine.run(subject, case, split, cotangents, exact)
    except RankFailure as error:
        verdict = state["fatal"] = rank_failure(error)
    verdict.cotangents = exact_cotangents
    verdict.case = case
    if not verdict.ok:  # every failing example, by its case: each distinct bug's snippet is rendered from it
        # a chunk's forward that returned what the contract does not is the forward's bug: the forward's snippet
        shown = None if verdict.kind == STRUCTURE else cotangents
        state.setdefault("failing", {})[id(case)] = _Failing(case, split, shown,
                                                             [str(failure) for failure in verdict.failures])
    return verdict


def named_on_a_telling_split(engine: Engine, subject: Subject, task: CellTask, case: Case, verdict: Verdict,
                             messages: list[str]) -> list[str]:
    """The failures' `messages` (one per failure of `verdict`, in order); where one names several mistakes of the
    combination at once (on an even split of equal rows, a chunk's own count and a factor of R or G give one value),
    with what the function gives on the fixed case of rows of different counts split into chunks of different rows
    (the engine's `telling_split`), where they differ, if that names fewer. One more run of the split (none where
    the engine has no such split); the snippet still reproduces the shrunk case alone. A run that overruns its time
    limit, or ranks that die, add nothing."""
    if not ambiguous(verdict):
        return list(messages)
    contract = case.contract
    fixed = draw_case(drawer(AnchorDraws(MIXED_COUNTS, contract)), dtypes=[task.dtype], layouts=("contiguous",),
                      devices=[task.device], contract=contract, masked_values=subject.masked_values,
                      emphasis="splits")
    chunks = uneven_chunks(fixed, task.mesh)
    arranged = engine.telling_split(subject, fixed, chunks)
    if arranged is None:
        return list(messages)
    try:
        seen = engine.run(subject, *arranged, None, None)
    except (CallTimedOut, RankFailure):
        return list(messages)
    rows, tokens = fixed.shape
    sizes = [str(end - start) for start, end in itertools.pairwise(chunks.cuts)]
    where = (f"the fixed case '{MIXED_COUNTS.name}', {rows} x {tokens}, in chunks of {', '.join(sizes[:-1])} and "
             f"{sizes[-1]} rows")
    return with_fewer_causes(messages, verdict, seen, where)


def rank_failure(error: RankFailure) -> Verdict:
    """The failing verdict of an example whose ranks died or hung: a rank's own failure first where the others hung
    waiting for it (its kind is the bug's, as on a split where no rank waits), then what became of the ranks."""
    verdict = Verdict(traceback=error.traceback)
    verdict.failures += error.failures
    verdict.fail(RANK_FAILED, str(error))
    return verdict


def run_sharded_cell(task: CellTask, watcher: Watcher | None = None, subject: Subject | None = None) -> CellResult:
    """Fuzz one engine's cell. An engine in this process calls the function here, each call under `watcher`'s
    time limit (a call that overruns fails the cell with its case); one on ranks has their deadlines. `subject`:
    one already built (the API's function object), else the task's is."""
    engine = engine_named(task.engine or "")
    subject = subject or engine_subject(task.subject, engine.name)
    if engine.in_process and watcher is not None:
        subject = watch_subject(subject, watcher)
    state: dict[str, Any] = {}

    def bug(subject: Subject, case: Case, verdict: Verdict) -> Bug:
        failing = state["failing"][id(case)]
        snippet = snippet_under_free_name(  # the function under a name the snippet's own code does not bind
            lambda chosen: engine.snippet(chosen, failing.case, failing.split, failing.cotangents, failing.failures),
            subject)
        failures = [str(failure) for failure in verdict.failures]
        if task.check == "forward":
            failures = named_on_a_telling_split(engine, subject, task, case, verdict, failures)
        return Bug(verdict.kind, failures, case, snippet, verdict.traceback)

    started = time.perf_counter()
    try:
        return fuzz_cell(subject, dtype=task.dtype, device=task.device, layouts=("contiguous",),
                         max_examples=task.examples, seed=task.seed, check=task.row,
                         example_check=lambda subject, case, data, _repeat: _example(task, engine, subject, state,
                                                                                     case, data),
                         bug=bug, emphasis="splits",
                         fixed=fixed_cases(task.check, split=True))
    except CallTimedOut as stopped:
        return interrupted_cell(snippet_source(subject), task, stopped.call, timed_out_in_process(stopped),
                                TIMEOUT, seconds=time.perf_counter() - started, contract=subject.contract.label)
    except DidNotStart as error:  # the harness's failure: an Exception again, past Hypothesis
        raise RuntimeError(str(error)) from error.__cause__
