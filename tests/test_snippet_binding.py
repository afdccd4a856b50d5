"""A failure's snippet runs on its own, from any directory, for every way a trainer passes their function to
`fuzz.check`: a function of a module that imports the modules beside it, a `functools.partial` (how the README
binds a mode), a lambda."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys

import pytest

from fuzz import check
from fuzz.loader import display_name, snippet_binding

HELPERS = """
def width(token_mask):
    return token_mask.shape[-1]  # the padded width, not the count
"""

TRAINER = """
import numpy as np

import helpers


def loss(token_losses, token_mask, scale):
    selected = np.where(token_mask, token_losses, 0).astype(np.float64)
    return np.asarray(scale * selected.sum() / max(helpers.width(token_mask) * len(token_mask), 1))


LOSSES = {"buggy": (lambda t, m: loss(t, m, 1.0), "a lambda inside a larger statement")}
"""


@pytest.fixture()
def trainer(tmp_path):
    """A trainer's module in a folder of its own, beside the helper module it imports."""
    folder = tmp_path / "my_trainer"
    folder.mkdir()
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "loss.py").write_text(TRAINER)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("loss", folder / "loss.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("helpers", None)


def _run_snippet(snippet: str, tmp_path) -> subprocess.CompletedProcess:
    """The snippet saved and run by a fresh interpreter in another directory, the suite importable."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "snippet.py"
    path.write_text(snippet)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = str(importlib.util.find_spec("fuzz").submodule_search_locations[0]).rsplit("/", 1)[0]
    return subprocess.run([sys.executable, str(path)], cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": root})


def _assert_reproduces(function, tmp_path) -> None:
    report = check(function, framework="numpy", reduction="token-mean", dtypes=["float64"], max_examples=20,
                   seed=0, fail_fast=True)
    assert not report.ok
    run = _run_snippet(report.failures[0].snippet, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    # the bug itself, found again: an out-of-tolerance loss, not a snippet that cannot call the function
    assert "AssertionError: loss" in run.stderr, run.stderr[-2000:]
    assert "raised" not in run.stderr, run.stderr[-2000:]


def test_the_snippet_of_a_module_function_imports_the_modules_beside_it(trainer, tmp_path):
    lines, name = snippet_binding(trainer.loss)
    assert (name, lines[-1]) == ("loss", "loss = _module.loss")
    assert "sys.path.insert(0, os.path.dirname(_file))" in lines[-5]
    _assert_reproduces(functools.partial(trainer.loss, scale=1.0), tmp_path)


def test_the_snippet_of_a_partial_rebuilds_it_and_names_it(trainer, tmp_path):
    bound = functools.partial(trainer.loss, scale=1.0)
    assert display_name(bound) == "partial(loss, scale=1.0)"
    lines, name = snippet_binding(bound)
    assert lines[-1] == f"{name} = functools.partial(loss, scale=1.0)"
    _assert_reproduces(bound, tmp_path)


def test_the_snippet_of_a_lambda_binds_its_expression(trainer, tmp_path):
    function = trainer.LOSSES["buggy"][0]
    lines, name = snippet_binding(function)
    assert display_name(function) == "<lambda>" and name == "function"
    assert lines[-1] == "function = lambda t, m: loss(t, m, 1.0)"  # after the trainer module's names
    _assert_reproduces(function, tmp_path)


def test_a_partial_of_values_without_a_literal_says_to_bind_them():
    lines, name = snippet_binding(functools.partial(print, object()))
    assert lines[-1] == f"{name} = functools.partial(print)" and "bind its arguments here" in lines[-2]
    compile("\n".join(lines), "<snippet>", "exec")  # still valid Python
