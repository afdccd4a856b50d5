"""Hypothesis' hill climbing on the err/tol targets ends where a cell has failed (fuzz.run.targeting): a cell
that fails before the climb would start runs exactly the examples it runs with no targeting at all, and
reports the same bug; a failure the climb itself finds ends it at once; a cell that never fails runs as
Hypothesis runs it."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import Phase, given, seed, target
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine

import fuzz.run.cell
from fuzz import check
from fuzz.run.cell import hypothesis_settings
from fuzz.run.targeting import climbing_until_a_failure
from tests.corpus_entries import CORPUS

# Keeps its float16 count in float16: a row of more than 2048 selected tokens is counted wrong. Its float16 cell
# fails before Hypothesis' climb starts (half-way through the budget of 40), and the climb then went on from the
# failing example.
LENGTH_COUNTER = f"{CORPUS / 'torch_length_counter_in_input_dtype.py'}:loss_normalization"
CORRECT = f"{CORPUS / 'torch_plain_input_dtype.py'}:loss_normalization"


def _cell(target: str, dtype: str):
    (cell,) = check(target, framework="torch", dtypes=[dtype], gradients=False).cells
    return cell


def _without_targeting(monkeypatch) -> None:
    settings = fuzz.run.cell.hypothesis_settings

    def no_target_phase(*args, **kwargs):
        chosen = settings(*args, **kwargs)
        return chosen.__class__(chosen, phases=[phase for phase in chosen.phases if phase is not Phase.target])

    monkeypatch.setattr(fuzz.run.cell, "hypothesis_settings", no_target_phase)


def test_a_failing_cell_runs_no_climbing_example_after_its_failure(monkeypatch):
    failing = _cell(LENGTH_COUNTER, "float16")
    assert not failing.ok and failing.bugs
    with monkeypatch.context() as patched:
        _without_targeting(patched)
        untargeted = _cell(LENGTH_COUNTER, "float16")
    assert failing.examples == untargeted.examples, (failing.examples, untargeted.examples)
    assert [bug.case.shape for bug in failing.bugs] == [bug.case.shape for bug in untargeted.bugs]
    assert [bug.failures for bug in failing.bugs] == [bug.failures for bug in untargeted.bugs]


def test_a_cell_that_never_fails_climbs_as_hypothesis_does(monkeypatch):
    correct = _cell(CORRECT, "float32")
    assert correct.ok
    with monkeypatch.context() as patched:
        patched.setattr(fuzz.run.cell, "climbing_until_a_failure", lambda failed: contextlib.nullcontext())
        unchanged = _cell(CORRECT, "float32")
    assert (correct.examples, correct.worst) == (unchanged.examples, unchanged.worst)
    with monkeypatch.context() as patched:
        _without_targeting(patched)
        untargeted = _cell(CORRECT, "float32")
    assert untargeted.examples < correct.examples or untargeted.worst != correct.worst  # it did climb


@pytest.mark.parametrize("stopping", [True, False], ids=["stopped", "as-hypothesis-climbs"])
def test_a_failure_found_by_the_climb_ends_it_at_once(monkeypatch, stopping):
    """Six bytes fail when all are 160 or more: generation seldom draws that, and at seed 4 the climb on their sum
    reaches it. Bytes, since Hypothesis draws some integers from the literals of the loaded modules: these draws
    do not change as code does. Hypothesis' climb is told apart by wrapping the engine's `optimise_targets`."""
    climbing, seen = [False], {"failed": False, "failed while climbing": False, "climbing examples after": 0}
    optimise_targets = engine.ConjectureRunner.optimise_targets

    def watched(self, *args, **kwargs):
        climbing[0] = True
        try:
            return optimise_targets(self, *args, **kwargs)
        finally:
            climbing[0] = False

    monkeypatch.setattr(engine.ConjectureRunner, "optimise_targets", watched)

    @given(st.data())
    def high_bytes_fail(data):
        if seen["failed"] and climbing[0]:
            seen["climbing examples after"] += 1
        values = [data.draw(st.binary(min_size=1, max_size=1))[0] for _ in range(6)]
        target(float(sum(values)), label="sum")
        if min(values) >= 160:
            seen["failed while climbing"] |= not seen["failed"] and climbing[0]
            seen["failed"] = True
            raise AssertionError

    climbs = climbing_until_a_failure(lambda: seen["failed"]) if stopping else contextlib.nullcontext()
    with pytest.raises(AssertionError), climbs:
        seed(4)(hypothesis_settings(40)(high_bytes_fail))()
    assert seen["failed while climbing"]
    assert (seen["climbing examples after"] == 0) == stopping, seen
