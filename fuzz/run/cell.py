"""One cell under Hypothesis (a subject on one device in one dtype, one check): examples run, worst err/tol and
ulps, and every distinct kind of failure, each shrunk on its own with its snippet; and the cell's fixed cases
(fuzz.judge.anchors), before the draws or after them.

Distinct bugs: each example that fails raises an exception whose type stands for its failure kind (the
first check that failed), so Hypothesis' report_multiple_bugs tells the kinds apart, shrinks each to its
own minimal case and reports them simplest first."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from fuzz.judge.anchors import MIXED_COUNTS, NO_FIXED_CASES, Anchor, AnchorDraws, FixedCases, fixed_cases
from fuzz.judge.draws import Draw, choice, draw_case, drawer
from fuzz.judge.example import check_example
from fuzz.judge.forward import failed_on_the_second_call
from fuzz.judge.gradients import gradient_example
from fuzz.judge.misfit import add_misfit_hint, integer_masks_hint
from fuzz.judge.subject import Subject
from fuzz.judge.verdict import Verdict
from fuzz.report.results import FIXED_CASE, Bug, CellResult
from fuzz.report.snippet import snippet_for
from fuzz.report.terminal import progress_line
from fuzz.run.calls import CallTimedOut, Watcher
from fuzz.run.interrupted import TIMEOUT, interrupted_cell, timed_out_in_process
from fuzz.run.plan import CellTask
from fuzz.run.subjects import snippet_source, watch_subject
from fuzz.run.targeting import climbing_until
from reference.case import Case
from reference.contract import ALTERNATIVES, Contract
from reference.contracts import get_contract

TARGET_CAP = 1e6  # hypothesis.target needs finite scores; anything above 1 is a failure anyway

# One example: (the subject, the drawn case, Hypothesis' data for further draws, whether to call a second time for
# the determinism fact) -> its verdict.
ExampleCheck = Callable[[Subject, Case, Any, bool], Verdict]


@dataclass
class Counterexample(Exception):
    case: Case
    verdict: Verdict


_KIND_TYPES: dict[str, type[Counterexample]] = {}


def counterexample_of_kind(kind: str) -> type[Counterexample]:
    """A Counterexample subclass per failure kind: Hypothesis tells bugs apart by exception type and place."""
    if kind not in _KIND_TYPES:
        _KIND_TYPES[kind] = type(f"Counterexample[{kind}]", (Counterexample,), {})
    return _KIND_TYPES[kind]


def _counterexamples(error: BaseException) -> list[Counterexample]:
    """Every Counterexample in what Hypothesis raised (one, a group of distinct bugs, or flaky groups)."""
    if isinstance(error, Counterexample):
        return [error]
    found = [inner for group in getattr(error, "exceptions", ()) for inner in _counterexamples(group)]
    if not found and error.__cause__ is not None:
        found = _counterexamples(error.__cause__)
    return found


def _stopping(error: BaseException) -> BaseException | None:
    """What in Hypothesis' error is no Exception (a call's time limit, Ctrl-C): it ends the cell at once. Explicit
    examples run on after one fails (report_multiple_bugs), so a fixed case's counterexample may come grouped with
    the next one's time limit in a BaseExceptionGroup."""
    if isinstance(error, Exception):
        return None
    for inner in getattr(error, "exceptions", ()):
        if (found := _stopping(inner)) is not None:
            return found
    return error


def hypothesis_settings(max_examples: int, *, derandomize: bool = False, draws: bool = True) -> settings:
    """The cell's settings; `draws=False`: only the explicit examples (a cell's last fixed cases)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink) if draws else (Phase.explicit,),
        report_multiple_bugs=True,
    )


def contract_label(subject: Subject) -> str:
    """What a cell of the subject checks: its contract as bound, or for a built-in fuzzed in every binding of its
    declared parameters, the contract and how many."""
    if subject.draws_parameters:
        return f"{subject.contract.name} (every mode)"
    return subject.contract.label


def forward_example(subject: Subject, case: Case, data: st.DataObject, repeat: bool = True) -> Verdict:
    """One forward example: the case, and one of its contract's relations."""
    relation = drawer(data)(choice(subject.relations(case.contract)), "metamorphic relation")
    return check_example(subject, case, relation, repeat=repeat)


def fuzz_cell(subject: Subject, *, dtype: str, device: str, layouts: Sequence[str], max_examples: int, seed: int,
              check: str = "forward", example_check: ExampleCheck = forward_example,
              bug: Callable[[Subject, Case, Verdict], Bug] | None = None, emphasis: str = "any",
              fixed: FixedCases = NO_FIXED_CASES) -> CellResult:
    """Fuzz one (subject, device, dtype) cell; shrink each distinct failure and render its snippet (`bug`
    renders one: a sharded engine's snippets launch their own ranks). `fixed`: the fixed cases checked before the
    draws, and after them when they found nothing, as Hypothesis' explicit examples (fuzz.judge.anchors)."""
    result = CellResult(subject.name, device, dtype, check, layouts=tuple(layouts), precision=subject.precision.name,
                        contract=contract_label(subject))
    started = time.perf_counter()
    failed = second_call_failed = False  # an example failed; one of them only in its second call
    drawn = 0  # examples Hypothesis drew (the fixed cases are not), failing ones included

    def cell_case(draw: Draw, contract: Contract) -> Case:
        """A case of this cell's dtype, device and layouts, drawn by `draw` (Hypothesis' or a fixed case's)."""
        return draw_case(draw, dtypes=[dtype], layouts=layouts, devices=[device], contract=contract,
                         masked_values=subject.masked_values, emphasis=emphasis)

    def property_holds(data: st.DataObject) -> None:
        nonlocal failed, second_call_failed, drawn
        contract, draw = subject.contract, drawer(data)
        if subject.draws_parameters:  # a built-in fuzzed in every mode: one drawn per example
            menu = contract.parameter_menu
            index = draw(choice(tuple(range(len(menu)))), "declared parameters")
            contract = get_contract(contract.name, menu[index])
        case = cell_case(draw, contract)
        if contract.bound:
            case = case.with_(story=((contract.name, contract.parameters_text), *case.story))
        if isinstance(data, AnchorDraws):
            case = case.with_(story=((FIXED_CASE, data.anchor.name), *case.story))
        # Once the cell has failed, the examples left are mostly the shrinker's tries, most of which pass: the
        # determinism fact (a second call) would be reported for none of them, and it doubled their cost. Unless a
        # failure came from that second call: the shrinker must see it again.
        repeat = not failed or second_call_failed
        verdict = example_check(subject, case, data, repeat)
        result.examples += 1
        if not isinstance(data, AnchorDraws):
            drawn += 1
        result.worst = max(result.worst, verdict.worst)  # inf for a NaN or inf value, as its bug's message says
        result.worst_ulps = max(result.worst_ulps, verdict.ulps)
        if verdict.deterministic is not None:
            result.deterministic = verdict.deterministic and result.deterministic is not False
        for label, ratio in verdict.error_ratios.items():
            target(min(ratio, TARGET_CAP), label=label)
        if not verdict.ok:
            add_misfit_hint(verdict, subject.misfit, integer_masks_hint(subject.adapter.name, subject.contract))
            failed, second_call_failed = True, second_call_failed or failed_on_the_second_call(verdict)
            raise counterexample_of_kind(verdict.kind)(verdict.case or case, verdict)

    def run(anchors: Sequence[Anchor], draws: bool) -> None:
        test = given(st.data())(property_holds)
        anchors = [anchor for anchor in anchors if anchor.checked_by(dtype, subject.compiled)]
        if not anchors and not draws:  # none of the fixed cases is this cell's (a float16 one in a float32 cell)
            return
        for anchor in reversed(anchors):  # Hypothesis runs explicit examples last decorated first
            test = example(AnchorDraws(anchor, subject.contract))(test)
        # Hypothesis' climb past the budget once a failure exists (fuzz/run/targeting.py) ends with the budget
        with climbing_until(lambda: failed and drawn >= max_examples):
            hypothesis_seed(seed)(hypothesis_settings(max_examples, draws=draws)(test))()

    try:
        run(fixed.first, draws=True)
        if fixed.last:  # the draws found nothing
            run(fixed.last, draws=False)
    except BaseException as error:
        stop = _stopping(error)
        if stop is error:
            raise
        if stop is not None:  # grouped by Hypothesis with a fixed case's counterexample: it still ends the cell
            raise stop from None
        found = _counterexamples(error)
        if not found:
            raise
        kinds = dict.fromkeys(found_one.verdict.kind for found_one in found)  # Hypothesis' order: simplest first
        render = bug or single_process_bug
        for one in (next(f for f in found if f.verdict.kind == kind) for kind in kinds):
            rendered = render(subject, one.case, one.verdict)
            if bug is None and check == "forward":  # a single-process forward cell: its failures, in order
                rendered.failures = named_where_counts_differ(subject, one.case, one.verdict, rendered.failures,
                                                              cell_case)
            result.bugs.append(rendered)
    result.seconds = time.perf_counter() - started
    return result


def named_where_counts_differ(subject: Subject, case: Case, verdict: Verdict, messages: list[str],
                              cell_case: Callable[[Draw, Contract], Case]) -> list[str]:
    """The failures' `messages` (one per failure of `verdict`, in order); where one names several mistakes at once
    for a wrong value (its shrunk case makes them coincide: in a batch of one token the padded width, every
    position and the count are all 1), with what the function's value names on the fixed case of rows of different
    counts, one of them empty, where most differ, if that names fewer. `cell_case` draws a case as the cell does.
    One more call of the function (none where the case is that fixed case); the snippet still reproduces the shrunk
    case alone. A call that overruns its time limit there adds nothing in this process (a worker process is
    stopped, as for any call)."""
    if not ambiguous(verdict) or dict(case.story).get(FIXED_CASE) == MIXED_COUNTS.name:
        return list(messages)
    other = cell_case(drawer(AnchorDraws(MIXED_COUNTS, case.contract)), case.contract)
    try:
        seen = check_example(subject, other, None, repeat=False)
    except CallTimedOut:
        return list(messages)
    rows, tokens = other.shape
    return with_fewer_causes(messages, verdict, seen, f"the fixed case '{MIXED_COUNTS.name}', {rows} x {tokens}")


def ambiguous(verdict: Verdict) -> list[int]:
    """Which of the verdict's failures name several mistakes at once (their hint lists alternatives)."""
    return [index for index, failure in enumerate(verdict.failures) if failure.hint and ALTERNATIVES in failure.hint]


def with_fewer_causes(messages: list[str], verdict: Verdict, seen: Verdict, where: str) -> list[str]:
    """`messages` (one per failure of `verdict`, in order), each failure that names several mistakes at once
    followed by what the same kind of failure names in `seen` (the function's verdict on the case `where` says),
    where that names fewer."""
    messages = list(messages)
    for index in ambiguous(verdict):
        failure = verdict.failures[index]
        there = next((each.hint for each in seen.failures if each.kind == failure.kind and each.hint), None)
        if there is not None and there.count(ALTERNATIVES) < failure.hint.count(ALTERNATIVES):
            messages[index] += f" (on {where}, where they give different values: {there})"
    return messages


def single_process_bug(subject: Subject, case: Case, verdict: Verdict) -> Bug:
    """A shrunk counterexample as a reported bug, with the snippet that reproduces it."""
    failures = [str(failure) for failure in verdict.failures]
    snippet = snippet_for(snippet_source(subject), case, failures, verdict.cotangents)
    return Bug(verdict.kind, failures, case, snippet, verdict.traceback)


def progress(task: CellTask, cell: CellResult) -> None:
    """A line per cell on stderr, as it finishes: one write of the whole line, so that the workers' lines (one
    stderr for all) never run into each other."""
    sys.stderr.write(progress_line(task.row, cell, task.device, task.dtype) + "\n")
    sys.stderr.flush()


def fuzz_task(subject: Subject, task: CellTask, watcher: Watcher) -> CellResult:
    """Fuzz one cell of `subject` in this process; a call that overruns the watcher's time limit fails the cell
    with its case."""
    if (task.check == "gradients" and not subject.has_gradients) or task.dtype not in subject.supported_dtypes:
        return CellResult(subject.name, task.device, task.dtype, task.check, applicable=False,
                          contract=contract_label(subject))
    started = time.perf_counter()
    try:
        cell = fuzz_cell(watch_subject(subject, watcher), dtype=task.dtype, device=task.device,
                         layouts=subject.adapter.layouts, max_examples=task.examples, seed=task.seed,
                         check=task.check, fixed=fixed_cases(task.check),
                         example_check=gradient_example if task.check == "gradients" else forward_example)
    except CallTimedOut as stopped:
        cell = interrupted_cell(snippet_source(subject), task, stopped.call, timed_out_in_process(stopped),
                                TIMEOUT, seconds=time.perf_counter() - started, contract=contract_label(subject))
    progress(task, cell)
    return cell
