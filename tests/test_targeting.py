"""Hypothesis' hill climbing on the err/tol targets keeps within a cell's budget (fuzz.run.targeting): a failing
cell climbs until its budget of drawn examples is spent, then shrinks, where Hypothesis climbed on past it; a
climb ends at the step where it is told to; a cell that never fails runs exactly as under Hypothesis alone."""

from __future__ import annotations

import contextlib

from hypothesis import given, seed, target
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from hypothesis.internal.conjecture.optimiser import Optimiser

import fuzz.run.cell
from fuzz import check
from fuzz.run.cell import hypothesis_settings
from fuzz.run.targeting import climbing_until
from tests.corpus_entries import CORPUS

# Keeps its float16 count in float16: a row of more than 2048 selected tokens is counted wrong. Its float16 cell
# fails before Hypothesis' climb starts (half-way through the budget of 40), and the climb then went on past the
# budget, from the failing example.
LENGTH_COUNTER = f"{CORPUS / 'torch_length_counter_in_input_dtype.py'}:loss_normalization"
CORRECT = f"{CORPUS / 'torch_plain_input_dtype.py'}:loss_normalization"
BUDGET = 40  # check's default forward examples per cell


def _cell(target_: str, dtype: str):
    (cell,) = check(target_, framework="torch", dtypes=[dtype], gradients=False, max_examples=BUDGET).cells
    return cell


class _Phases:
    """Which of Hypothesis' phases runs, told by wrapping the engine's methods for the climb and the shrink."""

    def __init__(self, monkeypatch) -> None:
        self.now = "generate"
        for method, phase in (("optimise_targets", "climb"), ("shrink_interesting_test_cases", "shrink")):
            monkeypatch.setattr(engine.ConjectureRunner, method, self._watched(getattr(engine.ConjectureRunner, method),
                                                                               phase))

    def _watched(self, method, phase):
        def watched(runner, *args, **kwargs):
            outer, self.now = self.now, phase
            try:
                return method(runner, *args, **kwargs)
            finally:
                self.now = outer if phase == "climb" else "done"

        return watched


def test_a_failing_cell_climbs_within_its_budget_then_shrinks(monkeypatch):
    phases, seen = _Phases(monkeypatch), {"generate": 0, "climb": 0, "shrink": 0, "done": 0}
    count = fuzz.run.cell.check_example

    def counted(*args, **kwargs):
        seen[phases.now] += 1
        return count(*args, **kwargs)

    monkeypatch.setattr(fuzz.run.cell, "check_example", counted)
    failing = _cell(LENGTH_COUNTER, "float16")
    assert not failing.ok and [bug.kind for bug in failing.bugs] == ["token_averaged out of tolerance"], failing.bugs
    assert seen["climb"] > 0 and seen["shrink"] > 0, seen  # it climbed, and shrank its failure
    assert seen["generate"] + seen["climb"] <= BUDGET, seen  # 20 generated and 448 climbing before


def test_a_climb_ends_at_the_step_where_it_is_told_to(monkeypatch):
    """No failure here: Hypothesis climbs the second half of the budget (examples 21 to 40) on six bytes' sum, and
    is told to stop at the 25th example. Bytes, as Hypothesis draws some integers from the literals of the loaded
    modules, and these draws must not move as code does."""
    phases, calls, climbing_after = _Phases(monkeypatch), [0], [0]

    @given(st.data())
    def sums(data):
        calls[0] += 1
        climbing_after[0] += calls[0] > 25 and phases.now == "climb"
        target(float(sum(data.draw(st.binary(min_size=1, max_size=1))[0] for _ in range(6))), label="sum")

    run = seed(0)(hypothesis_settings(BUDGET)(sums))
    run()
    assert climbing_after[0] > 0 and calls[0] == BUDGET  # as Hypothesis climbs
    calls[0] = climbing_after[0] = 0
    with climbing_until(lambda: calls[0] >= 25):
        run()
    assert climbing_after[0] == 0 and calls[0] == BUDGET  # generation draws the rest of the budget


def _drawn_cases(monkeypatch) -> list[bytes]:
    """Every case the cell's forward examples check, in order, as bytes: its story and its values."""
    cases, check_example = [], fuzz.run.cell.check_example

    def recorded(subject, case, *args, **kwargs):
        cases.append(repr(case.story).encode() + b"".join(values.tobytes() for values in case.values.values()))
        return check_example(subject, case, *args, **kwargs)

    monkeypatch.setattr(fuzz.run.cell, "check_example", recorded)
    return cases


def test_a_cell_that_never_fails_runs_as_under_hypothesis_alone(monkeypatch):
    with monkeypatch.context() as patched:
        cases = _drawn_cases(patched)
        correct = _cell(CORRECT, "float32")
    assert correct.ok
    with monkeypatch.context() as pristine:
        for name in ("run", "hill_climb", "consider_new_data"):
            pristine.setattr(Optimiser, name, getattr(Optimiser, name).__wrapped__)
        pristine.setattr(fuzz.run.cell, "climbing_until", lambda stop: contextlib.nullcontext())
        alone_cases = _drawn_cases(pristine)
        alone = _cell(CORRECT, "float32")
    assert cases == alone_cases  # the same examples, climbing ones included, in the same order
    assert (correct.examples, correct.worst, correct.worst_ulps) == (alone.examples, alone.worst, alone.worst_ulps)
