"""A failure's snippet runs on its own, from any directory, for every way a trainer passes their function to
`fuzz.check`: a function of a module that imports the modules beside it, a `functools.partial` (how the README
binds a mode), a lambda."""

from __future__ import annotations

import fractions
import functools
import importlib.util
import subprocess
import sys
import types

import pytest

from fuzz import check
from fuzz.report.binding import display_name, snippet_binding

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


def _module_from(path) -> types.ModuleType:
    """The module in `path`, loaded as a trainer's test loads it by path (not registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def trainer(tmp_path):
    """A trainer's module in a folder of its own, beside the helper module it imports."""
    folder = tmp_path / "my_trainer"
    folder.mkdir()
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "loss.py").write_text(TRAINER)
    sys.path.insert(0, str(folder))
    try:
        yield _module_from(folder / "loss.py")
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
    assert any("sys.path.insert(0, os.path.dirname(_file))" in line for line in lines)
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
    assert lines[-2:] == ("function = (lambda t, m: loss(t, m, 1.0)", ")")  # after the trainer module's names
    _assert_reproduces(function, tmp_path)


def test_a_partial_of_values_without_a_literal_says_to_define_it():
    lines, name = snippet_binding(functools.partial(print, object()))
    assert lines[-1] == f"{name} = None" and "define it here, its arguments bound" in lines[-2]
    compile("\n".join(lines), "<snippet>", "exec")  # still valid Python
    assert "\n" not in display_name(functools.partial(print, "a\nb" * 100))  # one line, cut short


DECORATED = """
import functools

import numpy as np


def with_eps(f):  # a decorator that supplies an argument of the function it wraps
    @functools.wraps(f)
    def wrapper(token_losses, token_mask):
        return f(token_losses, token_mask, eps=0.0)
    return wrapper


@with_eps
def loss(token_losses, token_mask, *, eps):
    return np.asarray(np.where(token_mask, token_losses, 0).sum() / max(token_mask.sum(), 1) + eps)


def make(scale):
    return lambda t, m: loss(t, m) * scale


scaled = make(2.0)
pair = (lambda t, m: loss(t, m) * 3.0, lambda t, m:
        loss(t, m) * 3.0 + 1.0)  # two lambdas on one line, one of them broken after its colon


def renamed(token_losses, token_mask):
    return loss(token_losses, token_mask) * 5.0


renamed.__name__ = "loss"
"""


@pytest.mark.parametrize(("attribute", "factor"), [("loss", 1.0), ("scaled", 2.0), ("renamed", 5.0)])
def test_decorated_closing_and_renamed_functions_bind_to_themselves(tmp_path, attribute, factor):
    """Each binding, run in a fresh interpreter, gives what the function gives (not another function's value)."""
    (tmp_path / "decorated.py").write_text(DECORATED)
    lines, name = snippet_binding(getattr(_module_from(tmp_path / "decorated.py"), attribute))
    script = "\n".join([*lines, "import numpy as np",
                        f"print(float({name}(np.array([[2.0, 4.0]]), np.array([[True, False]]))))"])
    run = subprocess.run([sys.executable, "-c", script], cwd="/", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and float(run.stdout) == 2.0 * factor, script + run.stderr


def test_a_lambda_broken_after_its_colon_or_sharing_its_lines_binds_to_itself(tmp_path):
    (tmp_path / "pairs.py").write_text(DECORATED)
    first, second = _module_from(tmp_path / "pairs.py").pair
    assert snippet_binding(first)[0][-2:] == ("function = (lambda t, m: loss(t, m) * 3.0", ")")
    assert snippet_binding(second)[0][-3:] == ("function = (lambda t, m:", "        loss(t, m) * 3.0 + 1.0", ")")
    same = [lambda t, m: 1.0, lambda t, m: 1.0]  # the same text twice: either is the function
    assert snippet_binding(same[1])[0][-2:] == ("function = (lambda t, m: 1.0", ")")


SCRIPT = '''
import numpy as np

from fuzz import check


def loss(token_losses, token_mask):  # the padded width as the count
    return np.asarray(np.where(token_mask, token_losses, 0).sum() / max(token_mask.size, 1))


if __name__ == "__main__":
    report = check(loss, framework="numpy", reduction="token-mean", dtypes=["float64"], max_examples=20, seed=0,
                   fail_fast=True)
    print("verdict", report.ok)
    with open("snippet.py", "w") as file:
        file.write(report.failures[0].snippet)
'''


def test_the_snippet_of_a_scripts_function_loads_the_script_without_its_main_block(tmp_path):
    script = tmp_path / "check_my_loss.py"
    script.write_text(SCRIPT)
    root = str(importlib.util.find_spec("fuzz").submodule_search_locations[0]).rsplit("/", 1)[0]
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": root})
    assert "verdict False" in ran.stdout, ran.stdout + ran.stderr
    snippet = (tmp_path / "snippet.py").read_text()
    assert "but not its `if __name__ == \"__main__\":` block" in snippet
    run = _run_snippet(snippet, tmp_path / "again")
    assert run.returncode == 1 and "AssertionError: loss" in run.stderr, run.stdout + run.stderr[-2000:]
    assert "verdict" not in run.stdout  # the script's own check did not run again


NAMED_AS_THE_SNIPPETS_OWN = """
import numpy


def {name}(token_losses, token_mask):
    selected = numpy.where(token_mask, token_losses, 0).astype(numpy.float64)
    return numpy.asarray(selected.sum() / max(token_mask.size, 1))  # the padded size, not the count
"""


@pytest.mark.parametrize("passed", ["value", "target", "nested"])
@pytest.mark.parametrize("name", ["as_float64", "out", "np", "print", "zip"])
def test_a_function_named_as_a_name_of_the_snippet_is_still_the_one_it_calls(tmp_path, name, passed):
    """A function named as one of the snippet's own variables or modules is imported under a name of its own, so the
    snippet calls it and finds its bug, not one of its own objects; one defined by its source (a nested function)
    is kept under that name, and the snippet's own module of its name (np) bound again after it."""
    path = tmp_path / "named.py"
    source = NAMED_AS_THE_SNIPPETS_OWN.format(name=name)
    if passed == "nested":
        source = source.replace(f"\ndef {name}(", f"\ndef make():\n  def {name}(").replace("\n    ", "\n      ")
        source += f"  return {name}\n"
    path.write_text(source)
    module = _module_from(path)
    function = {"value": lambda: getattr(module, name), "target": lambda: f"{path}:{name}",
                "nested": lambda: module.make()}[passed]()
    report = check(function, framework="numpy", reduction="token-mean", dtypes=["float64"], max_examples=20, seed=0,
                   fail_fast=True)
    snippet = report.failures[0].snippet
    bound = f"{name}_under_test = {name}" if passed == "nested" else f"{name}_under_test = _module.{name}"
    assert bound in snippet and f"{name}_under_test(token_losses" in snippet
    run = _run_snippet(snippet, tmp_path / "run")
    assert run.returncode == 1 and "AssertionError: loss" in run.stderr, run.stderr[-2000:]
    assert "raised" not in run.stderr, run.stderr[-2000:]


def test_a_function_named_as_nothing_of_the_snippet_keeps_its_import(tmp_path):
    path = tmp_path / "named.py"
    path.write_text(NAMED_AS_THE_SNIPPETS_OWN.format(name="loss"))
    snippet = check(f"{path}:loss", framework="numpy", reduction="token-mean", dtypes=["float64"], max_examples=20,
                    seed=0, fail_fast=True).failures[0].snippet
    assert "loss = _module.loss" in snippet and "_under_test" not in snippet


@pytest.mark.parametrize("passed", ["value", "target"])
def test_a_long_function_and_file_name_keep_the_snippet_within_the_terminals_columns(tmp_path, passed):
    """Names of 70 characters: every line of the snippet fits the 100 columns the terminal prints (the binding and
    the raised-error lines split), and it still reproduces the bug."""
    from fuzz.report.texts import WIDTH

    name = "aggregate_the_policy_gradient_loss_over_the_selected_tokens_of_each_row"
    path = tmp_path / "trainer_losses_module_with_a_name_that_is_rather_long_too.py"
    path.write_text(NAMED_AS_THE_SNIPPETS_OWN.format(name=name))
    function = getattr(_module_from(path), name) if passed == "value" else f"{path}:{name}"
    snippet = check(function, framework="numpy", reduction="token-mean", dtypes=["float64"], max_examples=20,
                    seed=0, fail_fast=True).failures[0].snippet
    assert max(len(line) for line in snippet.splitlines()) <= WIDTH, snippet
    run = _run_snippet(snippet, tmp_path / "run")
    assert run.returncode == 1 and "AssertionError: loss" in run.stderr, run.stderr[-2000:]


def test_the_import_that_binds_a_function_is_renamed_where_the_snippet_uses_its_name():
    from fuzz.report.callee import imported_as
    assert imported_as(("from pkg.losses import step",), "step", "step_under_test") == (
        "from pkg.losses import step as step_under_test",)
    assert imported_as(("import os", "loss = _module.loss"), "loss", "x") == ("import os", "x = _module.loss")
    assert imported_as(("def forward(a):", "    return a"), "forward", "f") == (
        "def forward(a):", "    return a", "f = forward", "del forward")
    assert imported_as(("def np(a):", "    return a"), "np", "g", ("import numpy as np",)) == (
        "def np(a):", "    return a", "g = np", "import numpy as np")


def test_a_function_defined_by_its_source_keeps_its_repeated_lines(tmp_path):
    """Its source is in the snippet as it is: a line it repeats is not an import to write once."""
    def doubled_twice(token_losses, token_mask):
        import numpy
        total = numpy.where(token_mask, token_losses, 0).sum(dtype=numpy.float64)
        total = total * 2.0
        total = total * 2.0
        return numpy.asarray(total / max(int(token_mask.sum()), 1))

    report = check(doubled_twice, framework="numpy", reduction="token-mean", dtypes=["float64"], max_examples=20,
                   seed=0, fail_fast=True)
    assert report.failures[0].snippet.count("total = total * 2.0") == 2


FACTORY = """
import numpy


def make():
    def print(token_losses, token_mask):  # named as the builtin the snippet prints with
        selected = numpy.where(token_mask, token_losses, 0).astype(numpy.float64)
        return numpy.asarray(selected.sum() / max(token_mask.size, 1))
    return print
"""


def test_a_function_defined_by_its_source_and_named_as_a_builtin_leaves_the_builtin_to_the_snippet(tmp_path):
    path = tmp_path / "factory.py"
    path.write_text(FACTORY)
    report = check(_module_from(path).make(), framework="numpy", reduction="token-mean", dtypes=["float64"],
                   max_examples=20, seed=0, fail_fast=True)
    snippet = report.failures[0].snippet
    assert "print_under_test = print" in snippet and "del print" in snippet
    run = _run_snippet(snippet, tmp_path / "run")
    assert run.returncode == 1 and "AssertionError: loss" in run.stderr and "raised" not in run.stderr, run.stderr


def test_the_snippet_of_a_packages_function_imports_it_by_its_name(tmp_path):
    """A package's module may import its siblings relatively: its snippet imports it as the user's code does, and
    runs wherever the package imports."""
    package = tmp_path / "proj" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(HELPERS)
    (package / "losses.py").write_text(TRAINER.replace("import helpers", "from . import helpers"))
    sys.path.insert(0, str(tmp_path / "proj"))
    try:
        import mypkg.losses
        report = check(functools.partial(mypkg.losses.loss, scale=1.0), framework="numpy", reduction="token-mean",
                       dtypes=["float64"], max_examples=20, seed=0, fail_fast=True)
    finally:
        sys.path.remove(str(tmp_path / "proj"))
        for name in ("mypkg", "mypkg.losses", "mypkg.helpers"):
            sys.modules.pop(name, None)
    snippet = report.failures[0].snippet
    assert "from mypkg.losses import loss" in snippet, snippet
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    root = str(importlib.util.find_spec("fuzz").submodule_search_locations[0]).rsplit("/", 1)[0]
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{root}:{tmp_path / 'proj'}"})
    assert run.returncode == 1 and "AssertionError: loss" in run.stderr, run.stderr[-2000:]


CONFIGURED = """
import dataclasses

import numpy as np


@dataclasses.dataclass
class Config:
    max_completion_length: int = 1024


def dr_grpo(token_losses, token_mask, args):
    selected = np.where(token_mask, token_losses, 0).astype(np.float64)
    return np.asarray(selected.sum() / max(len(token_mask) * token_mask.shape[-1], 1))  # the width, not L_max
"""


def test_the_snippet_of_a_partial_bound_to_a_config_object_rebuilds_it(tmp_path):
    """A loss with its config bound (`functools.partial(dr_grpo, args=Config(...))`, as a trainer's test binds a
    dataclass config): the snippet names the config's class from the module that defines it and rebuilds the
    partial, and reproduces the bug; an object whose repr does not rebuild it still says to define the partial."""
    folder = tmp_path / "configured"
    folder.mkdir()
    (folder / "losses.py").write_text(CONFIGURED)
    module = _module_from(folder / "losses.py")
    bound = functools.partial(module.dr_grpo, args=module.Config(max_completion_length=256))
    lines, name = snippet_binding(bound)
    assert lines[-3:] == ("Config = _module.Config", "import functools",
                          f"{name} = functools.partial(dr_grpo, args=Config(max_completion_length=256))"), lines
    report = check(bound, framework="numpy", reduction="dr_grpo", l_max=256, dtypes=["float64"], max_examples=20,
                   seed=0, fail_fast=True)
    assert not report.ok
    run = _run_snippet(report.failures[0].snippet, tmp_path / "run")
    assert run.returncode == 1 and "AssertionError: loss" in run.stderr, run.stderr[-2000:]
    opaque = functools.partial(module.dr_grpo, args=object())
    assert snippet_binding(opaque)[0][-1].endswith("= None")
    imported = snippet_binding(functools.partial(module.dr_grpo, args=fractions.Fraction(1, 3)))[0]
    assert imported[-3:-1] == ("from fractions import Fraction", "import functools"), imported


AUTOGRAD_FUNCTION = """
import torch


class SequenceMean(torch.autograd.Function):
    # seq-mean-token-mean with a backward of its own that forgets the 1/B
    @staticmethod
    def forward(ctx, token_losses, token_mask):
        acc = torch.promote_types(token_losses.dtype, torch.float32)
        counts = token_mask.sum(-1)
        ctx.save_for_backward(token_mask)
        ctx.input_dtype = token_losses.dtype
        sums = torch.where(token_mask, token_losses.to(acc), 0.0).sum(-1)
        return (sums / counts.clamp(min=1)).sum() / max(token_mask.shape[0], 1)

    @staticmethod
    def backward(ctx, cotangent):
        (token_mask,) = ctx.saved_tensors
        weights = cotangent / token_mask.sum(-1, keepdim=True).clamp(min=1)  # the bug: no 1/B
        return torch.where(token_mask, weights, 0.0).to(ctx.input_dtype), None
"""


def test_an_autograd_functions_apply_is_a_target_and_its_snippet_rebuilds_it(tmp_path):
    """A torch.autograd.Function is called through its `apply`, a method bound to the class: passed to `check` as
    `SequenceMean.apply`, its snippet imports the class and takes its `apply` (and fails on the bug); on the command
    line `FILE:SequenceMean.apply` is the target, and `FILE:SequenceMean` is told to name it so."""
    pytest.importorskip("torch")
    path = tmp_path / "fused_loss.py"
    path.write_text(AUTOGRAD_FUNCTION)
    module = _module_from(path)
    report = check(module.SequenceMean.apply, framework="torch", reduction="seq-mean-token-mean", dtypes=["float32"],
                   max_examples=5, gradient_examples=5)
    failure = next(f for f in report.failures if "gradients" in f.check)
    assert "apply = SequenceMean.apply" in failure.snippet, failure.snippet
    (tmp_path / "snippet.py").write_text(failure.snippet)
    replay = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert replay.returncode == 1 and "AssertionError" in replay.stderr, replay.stderr[-2000:]

    def command(target: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fuzz", "check", target, "--framework", "torch", "--reduction",
                               "seq-mean-token-mean", "--dtypes", "float32", "--max-examples", "5"],
                              capture_output=True, text=True, timeout=300)

    found = command(f"{path}:SequenceMean.apply")
    said = " ".join(found.stdout.split())  # unwrapped
    assert found.returncode == 1 and "gradients: d token_losses out of tolerance" in said, found.stdout + found.stderr
    told = command(f"{path}:SequenceMean")
    assert told.returncode == 2 and f"check {path}:SequenceMean.apply" in told.stderr, told.stderr
