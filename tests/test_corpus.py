"""The suite tests itself: `check` with its default budget rejects every bug of the public corpus
(tests/corpus/), and accepts every correct formulation at 10 times that budget (correct code must pass at
any budget); gradient bugs pass the forward check and fail `--gradients`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import check
from fuzz.judge.gradients import GRADIENT_OVERFLOW
from fuzz.judge.verdict import FORWARD_OVERFLOW
from impls.frameworks import FRAMEWORK_NAMES, adapter_class, check_modes
from tests.corpus_entries import CORPUS, FUNCTION, check_options, corpus_entries

# Every `check --framework` choice, from the adapters (torch, torch-compile, jax, numpy, array-api, ...)
FRAMEWORKS = set(check_modes())


def _adapter_name(framework: str) -> str:
    """The adapter a corpus entry's FRAMEWORK (a check mode) runs under: torch-compile -> torch."""
    return check_modes()[framework][0]


ENTRIES = corpus_entries()
REDUCTIONS = corpus_entries(CORPUS / "reductions")  # the loss reduction's bug classes and correct rewrites
ACCUMULATIONS = corpus_entries(CORPUS / "accumulation")  # over micro-batches and data-parallel ranks
# 10x the default budget (40 forward, 20 gradient examples per cell): no correct formulation may sit so near
# the tolerance that a longer run would flag it. On the default device only: a second device ("cpu:1" in
# JAX) tests where outputs land, not precision, and tests/test_devices.py covers it.
ACCEPT_BUDGET = {"max_examples": 400, "gradient_examples": 200, "devices": ["cpu"]}
# Engines' cells have budgets of their own (fuzz.api.check): 10x those too.
ENGINE_ACCEPT_BUDGET = {"accumulation": {"max_examples": 200, "gradient_examples": 100, "devices": ["cpu"]},
                        "ranks": {"max_examples": 100, "gradient_examples": 50, "devices": ["cpu"]}}


def _param(path: Path, meta: dict[str, str]):
    # The 10x runs of correct code are the longest tests (compiled ones most: torch.compile with gradients
    # compiles ~20 graphs per dtype): start them first so no worker ends on one.
    return pytest.param(path, meta, id=path.stem, marks=[pytest.mark.long] if meta.get("EXPECT") == "accept" else [])


def _run_check(path: Path, framework: str, meta: dict, **options):
    """What `check PATH:loss_normalization --framework F` (and the file's declared contract) does, with its
    defaults (40 forward and 20 gradient examples per cell where the framework differentiates, seed 0), through
    the Python API in this process:
    pytest-xdist already spreads the tests over the cores, and a worker process per check would import the
    frameworks again each time."""
    return list(check(f"{path}:{FUNCTION}", framework=framework, **check_options(meta), **options).cells)


def _assert_snippet_fails_on_its_own(snippet: str, cwd: Path) -> None:
    """The snippet, saved as a file and run as a fresh Python process (spawned ranks import it), reproduces the
    bug: it fails with AssertionError."""
    script = cwd / "snippet.py"
    script.write_text(snippet)
    replay = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=cwd, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert replay.returncode != 0 and "AssertionError" in replay.stderr, replay.stderr[-3000:]


def test_the_corpus_is_as_large_as_promised():
    kinds = [meta.get("EXPECT") for _, meta in ENTRIES]
    assert all(meta.get("FRAMEWORK") in FRAMEWORKS for _, meta in ENTRIES), ENTRIES
    assert kinds.count("reject") >= 15 and kinds.count("accept") >= 6 and kinds.count("reject-gradients") >= 3
    frameworks_with_bugs = {_adapter_name(meta["FRAMEWORK"]) for _, meta in ENTRIES if meta["EXPECT"] == "reject"}
    assert frameworks_with_bugs == set(FRAMEWORK_NAMES)  # every framework, the Array API included


def test_the_reduction_corpus_has_every_bug_class_and_correct_rewrites():
    kinds = [meta.get("EXPECT") for _, meta in REDUCTIONS]
    assert all(meta.get("CONTRACT") == "reduction" and meta.get("REDUCTION") for _, meta in REDUCTIONS), REDUCTIONS
    assert kinds.count("reject") >= 12 and kinds.count("accept") >= 7


def test_the_accumulation_corpus_has_every_bug_class_and_correct_variants():
    kinds = [meta.get("EXPECT") for _, meta in ACCUMULATIONS]
    assert all(meta.get("CONTRACT") == "accumulation" and meta.get("REDUCTION") for _, meta in ACCUMULATIONS)
    assert kinds.count("reject") >= 8 and kinds.count("accept") >= 3
    assert any(meta.get("RANKS") for _, meta in ACCUMULATIONS if meta["EXPECT"] == "accept")


@pytest.mark.parametrize(("path", "meta"), [_param(path, meta) for path, meta in ENTRIES + REDUCTIONS + ACCUMULATIONS])
def test_check_tells_bugs_from_correct_code(path, meta, tmp_path, record_property):
    framework, expect = meta["FRAMEWORK"], meta["EXPECT"]
    differentiable = adapter_class(_adapter_name(framework)).differentiable  # numpy and array-api: no autograd
    # Bugs: stop at the first failing cell (--fail-fast); correct code: the whole default budget.
    if expect == "reject":
        cells = _run_check(path, framework, meta, fail_fast=True)
        assert any(not cell.ok for cell in cells), f"{path.name}: no counterexample found"
        failing = next(cell for cell in cells if not cell.ok)  # forward cells run first, gradient cells after them
        assert "gradients" not in failing.check, f"{path.name}: found by its gradients only: {failing.failures}"
        assert failing.snippet and "= " in failing.snippet and "assert" in failing.snippet
        _assert_snippet_fails_on_its_own(failing.snippet, tmp_path)
        if meta.get("EXPLAINS"):  # the report names the bug in the contract's terms
            explained = [failure for cell in cells for failure in cell.failures if meta["EXPLAINS"] in failure]
            assert explained, f"{path.name}: no failure says {meta['EXPLAINS']!r}: {failing.failures}"
    elif expect == "accept":
        budget = ACCEPT_BUDGET
        if meta.get("CONTRACT") == "accumulation":
            budget = ENGINE_ACCEPT_BUDGET["ranks" if meta.get("RANKS") else "accumulation"]
        cells = _run_check(path, framework, meta, gradients=differentiable, **budget)
        # A half-precision value that overflows (a backward's N / D^2, a row sum kept in float16) is the dtype's
        # limit, not a bug of the formula: it is reported as an overflow with the advice to keep it in float32, the
        # one failure correct code may show.
        overflows = (GRADIENT_OVERFLOW, FORWARD_OVERFLOW)
        failures = [(c.dtype, c.check, c.failures, c.traceback) for c in cells
                    if c.problems or any(bug.kind not in overflows for bug in c.bugs)]
        assert not failures, f"{path.name} is correct but was rejected: {failures}"
        # How near the edge correct code came, kept in the JUnit report (`--junitxml`), over the cells without
        # an overflow (an overflow's err/tol is infinite, and it is reported as what it is above).
        for check_kind in ("forward", "gradients"):
            record_property(f"worst_err_tol_{check_kind}", max(
                (c.worst for c in cells if (check_kind == "gradients") == ("gradients" in c.check) and c.applicable
                 and c.ok), default=0.0))
    elif expect == "reject-gradients":
        cells = _run_check(path, framework, meta, gradients=True, fail_fast=True)  # all forward cells come first
        forward = [cell for cell in cells if "gradients" not in cell.check]  # "forward", or an engine's row
        assert len(forward) >= 4 and all(cell.ok for cell in forward), [c.failures for c in forward if not c.ok]
        failing = [cell for cell in cells if "gradients" in cell.check and not cell.ok]
        assert failing, f"{path.name}: its gradient bug was not found"
        assert "grad" in failing[0].snippet or "jax.vjp" in failing[0].snippet or "backward" in failing[0].snippet
        if meta.get("EXPLAINS"):  # the report names the bug in the contract's terms
            explained = [failure for cell in failing for failure in cell.failures if meta["EXPLAINS"] in failure]
            assert explained, f"{path.name}: no failure says {meta['EXPLAINS']!r}: {failing[0].failures}"
    else:
        pytest.fail(f"{path.name}: unknown EXPECT {expect!r}")
