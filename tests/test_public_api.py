"""A trainer's own test of its loss normalization, written the way a trainer would write it: only the
suite's public API (`from fuzz import ...`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from fuzz import Case, as_arrays, cases, check, check_case
from tests.conftest import SIGINT_AS_A_TERMINAL_SETS_IT

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

# Stands for the trainer's own helper: the suite's canonical implementation, copied into a trainer, with
# the trainer's own signature (a tuple) around it.
from impls.torch_eager import sequence_vs_token_normalization  # noqa: E402


def trainer_normalize(log_probs, advantages, mask):
    out = sequence_vs_token_normalization(log_probs, advantages, mask)
    return out["sequence_summed"], out["token_averaged"], out["magnitude_ratio"]


def normalize(token_log_probs, advantages, token_mask):  # the three lines that adapt it to the contract
    summed, averaged, ratio = trainer_normalize(token_log_probs, advantages, token_mask)
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}


def normalize_by_padded_length(token_log_probs, advantages, token_mask):  # a classic bug
    out = normalize(token_log_probs, advantages, token_mask)
    return {**out, "token_averaged": out["sequence_summed"] / max(token_log_probs.shape[1], 1)}


def test_our_normalization_conforms_forward_and_backward():
    report = check(normalize, framework="torch", gradients=True, dtypes=["bfloat16", "float32"],
                   max_examples=30, seed=0)
    report.raise_for_failures()
    assert report.ok and len(report.cells) == 4  # 2 dtypes x (forward, gradients) on the CPU
    assert all(cell.examples > 0 for cell in report.cells)


def test_a_bug_fails_with_the_shrunk_case_and_a_snippet():
    report = check(normalize_by_padded_length, framework="torch", dtypes=["float32"], max_examples=50, seed=0,
                   gradients=False)
    assert not report.ok
    failure = report.failures[0]
    assert failure.kind == "token_averaged out of tolerance" and "token_averaged" in failure.message
    assert failure.minimal_case["shape kind"] and "token_log_probs = torch.tensor(" in failure.snippet
    with pytest.raises(AssertionError, match=r"(?s)token_averaged.*reproduce with this snippet"):
        report.raise_for_failures()


def test_a_bug_in_every_dtype_raises_with_its_snippet_once():
    """A CI log gets each distinct bug once, with its case and snippet, and an item naming the other dtypes it
    shows in; within 100 columns but for the snippet; `failures` keeps every cell's case and snippet."""
    report = check(normalize_by_padded_length, framework="torch", dtypes=["float32", "float64"], max_examples=50,
                   seed=0, gradients=False)
    kinds = {(failure.kind, failure.check) for failure in report.failures}
    assert len(report.failures) > len(kinds) and all(failure.snippet for failure in report.failures)
    with pytest.raises(AssertionError) as raised:
        report.raise_for_failures()
    message = str(raised.value)
    assert message.count("reproduce with this snippet") == len(kinds)
    assert message.count("the same bug in 1 more cell ") == len(kinds) and "- forward in cpu float64: " in message
    first, rest = message.split("reproduce with this snippet:")
    items = rest[rest.index("the same bug in"):]
    assert all(len(line) <= 100 for line in (first + items).splitlines())


def refuses_an_empty_mask(token_losses, token_mask):
    if not token_mask.any():
        raise ValueError("no token selected")
    return torch.where(token_mask, token_losses, 0).sum() / token_mask.sum()


def test_an_exception_of_the_forward_pass_is_one_bug_in_the_forward_and_gradient_checks():
    """The gradient check runs the forward too, and names what it raised as the forward check does: one bug, one
    snippet in a CI log."""
    report = check(refuses_an_empty_mask, framework="torch", reduction="token-mean", dtypes=["float32"],
                   max_examples=5, seed=0)
    assert [(failure.check, failure.kind) for failure in report.failures] == [
        ("forward", "raised ValueError"), ("gradients", "raised ValueError")]
    with pytest.raises(AssertionError, match=r"^2 failure\(s\), 1 distinct bug\(s\)") as raised:
        report.raise_for_failures()
    assert str(raised.value).count("reproduce with this snippet") == 1


def sleeps(token_log_probs, advantages, token_mask):
    time.sleep(30)


def test_a_function_that_hangs_fails_instead_of_hanging_ci():
    started = time.monotonic()
    report = check(sleeps, framework="torch", dtypes=["float32"], timeout=1, gradients=False)
    assert time.monotonic() - started < 10
    assert [failure.kind for failure in report.failures] == ["call timed out"]
    assert "sleeps(token_log_probs, advantages, token_mask)" in report.failures[0].snippet
    # time.sleep is C code, which a thread cannot be interrupted in: the report says so, and what to do
    assert "could not be stopped" in report.failures[0].message and "workers=N" in report.failures[0].message


HANGS_IN_C = """
import time

from fuzz import check


def hangs(token_losses, token_mask):
    open("called", "w").close()
    time.sleep(3600)  # C code: the thread running the call cannot be interrupted in it


check(hangs, framework="numpy", reduction="token-mean", timeout=600)
"""


def test_ctrl_c_while_the_function_hangs_stops_check_at_once(tmp_path):
    """Ctrl-C while a call hangs in C code ends `check` with KeyboardInterrupt within the grace an interrupted
    call gets, as in a notebook or a pytest run of the trainer's: it does not wait for the call to return."""
    (tmp_path / "mine.py").write_text(HANGS_IN_C)
    code = SIGINT_AS_A_TERMINAL_SETS_IT + "import runpy\nrunpy.run_path('mine.py', run_name='__main__')\n"
    run = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "called").exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "called").exists(), run.communicate(timeout=60)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=30)  # the call itself returns an hour later
        assert run.returncode != 0 and stderr.rstrip().endswith("KeyboardInterrupt"), stderr[-3000:]
    finally:
        run.kill()


def spins(token_log_probs, advantages, token_mask):
    while True:
        pass


def test_a_function_that_loops_forever_is_interrupted_and_leaves_the_process_to_the_next_check():
    before = set(threading.enumerate())  # an earlier test's sleeping call may still be running
    report = check(spins, framework="torch", dtypes=["float32"], timeout=1)
    assert [failure.kind for failure in report.failures] == ["call timed out", "call timed out"]  # both cells
    assert all("was interrupted in its thread" in failure.message for failure in report.failures)
    assert not [thread for thread in set(threading.enumerate()) - before if thread.name == "lossnorm-fuzz call"]
    # no abandoned loop left to share the interpreter with: the next check runs at its usual speed
    started = time.monotonic()
    assert check(normalize, framework="torch", dtypes=["float32"], max_examples=10).ok
    assert time.monotonic() - started < 20


def interrupts(token_log_probs, advantages, token_mask):
    raise KeyboardInterrupt


def test_a_keyboard_interrupt_from_the_function_is_its_failure_not_a_stop_of_the_run():
    report = check(interrupts, framework="torch", dtypes=["float32"], max_examples=5, gradients=False)
    assert [failure.kind for failure in report.failures] == ["raised KeyboardInterrupt"]
    assert "raise KeyboardInterrupt" in report.cells[0].traceback


def raises_its_own_error(token_log_probs, advantages, token_mask):
    raise RuntimeError("the trainer's own bug")


@pytest.mark.parametrize("workers", [None, 1])
def test_a_traceback_starts_at_the_function_not_in_the_suites_calling_code(workers):
    report = check(raises_its_own_error, framework="torch", dtypes=["float32"], max_examples=5, workers=workers,
                   gradients=False)
    frames = report.cells[0].traceback.splitlines()
    assert frames[0] == "Traceback (most recent call last):"
    assert frames[1].startswith(f'  File "{__file__}"') and frames[1].endswith("in raises_its_own_error"), frames


def test_workers_keep_the_function_out_of_this_process():
    report = check(normalize_by_padded_length, framework="torch", dtypes=["float32"], max_examples=20, workers=1,
                   gradients=False)
    assert not report.ok and report.failures[0].kind == "token_averaged out of tolerance"


@settings(max_examples=25, deadline=None, database=None)
@given(case=cases(dtypes=["bfloat16", "float32"], layouts=["contiguous", "transposed", "step-sliced"]))
def test_our_own_hypothesis_test_with_the_suites_cases(case):
    token_log_probs, advantages, token_mask = as_arrays(case, "torch")
    assert token_log_probs.dtype == advantages.dtype == getattr(torch, case.dtype)
    assert tuple(token_log_probs.shape) == tuple(token_mask.shape) == case.shape
    assert check_case(normalize, case, "torch") == []


def test_check_case_says_what_is_wrong():
    case = Case(np.array([[-1.0, -2.0]]), np.array([2.0]), np.array([[True, False]]), dtype="float32")
    assert check_case(normalize, case, "torch") == []
    assert check_case(lambda *inputs: None, case, "torch") == [
        "returned NoneType, expected a dict with keys ('sequence_summed', 'token_averaged', 'magnitude_ratio')"]


def per_sequence_loss(token_losses, token_mask):  # a trainer's per-sequence mean, rows="all"
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    counts = token_mask.sum(-1)
    sums = torch.where(token_mask, token_losses, 0).sum(-1, dtype=acc)
    return (sums / counts.clamp(min=1)).sum() / max(token_losses.shape[0], 1)


@settings(max_examples=25, deadline=None, database=None)
@given(case=cases(dtypes=["bfloat16", "float32"], reduction="per-sequence"))
def test_our_own_hypothesis_test_of_a_loss_reduction(case):
    assert case.contract.label == "reduction (seq-mean-token-mean, rows=all)"
    token_losses, token_mask = as_arrays(case, "torch")
    assert token_losses.shape == token_mask.shape == case.shape and token_mask.dtype == torch.bool
    assert check_case(per_sequence_loss, case, "torch") == []


def test_the_cases_of_a_reduction_are_declared_as_check_declares_them():
    with pytest.raises(ValueError, match=r"seq-mean-token-sum-norm \(fixed-length\) mode needs l_max"):
        cases(reduction="fixed-length")
    with pytest.raises(ValueError, match="rows is a parameter of the loss reduction: it needs reduction too"):
        cases(rows="nonempty")


def test_a_cell_that_failed_without_a_case_is_counted_apart_from_the_distinct_bugs():
    """As the terminal's summary counts them: two workers that died are two failures without a case, not a bug."""
    from fuzz import Report
    from fuzz.report.results import Bug, CellResult

    case = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool), dtype="float32")
    bug = Bug("loss out of tolerance", ["loss = 2.0, expected 1.0"], case, "assert False\n")
    cells = (CellResult("f", "cpu", "float32", "forward", bugs=[bug]),
             CellResult("f", "cpu", "float64", "forward", problems=["the worker process died (exit code 9)"]),
             CellResult("f", "cpu", "float16", "forward", problems=["a call timed out without a case"]))
    with pytest.raises(AssertionError, match=r"^3 failure\(s\), 1 distinct bug\(s\), and 2 cell\(s\) failed without "
                                             r"a case:") as raised:
        Report(cells, ("float16", "float32", "float64")).raise_for_failures()
    assert "the worker process died" in str(raised.value) and "a call timed out" in str(raised.value)
