"""The Python API refuses bad arguments with an error naming the argument, before any fuzzing, and names what
it runs as the user wrote it."""

from __future__ import annotations

import functools
import multiprocessing
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import check

ROOT = Path(__file__).resolve().parents[1]
GOOD = "impls.numpy_impl:sequence_vs_token_normalization"


@pytest.mark.parametrize(("arguments", "error", "message"), [
    ({"gradient_examples": 0}, ValueError, "gradient_examples must be a positive int, got 0"),
    ({"max_examples": "5"}, TypeError, "max_examples must be a positive int, got str '5'"),
    ({"max_examples": 0}, ValueError, "max_examples must be a positive int, got 0"),
    ({"workers": 0}, ValueError, "workers must be a positive int, got 0"),
    ({"seed": "abc"}, TypeError, "seed must be an int, got str 'abc'"),
    ({"gradients": "yes"}, TypeError, "gradients must be True, False or None (wherever the framework differentiates), "
     "got str 'yes'"),
    ({"timeout": -1}, ValueError, "timeout must be a positive number of seconds, got -1"),
    ({"timeout": "10"}, TypeError, "timeout must be a positive number of seconds, got str '10'"),
    ({"dtypes": ["float8"]}, ValueError, "dtypes must be a non-empty subset of"),
    ({"dtypes": []}, ValueError, "dtypes must be a non-empty subset of"),
    ({"devices": [3]}, TypeError, "devices must be a list of names"),
    ({"framework": "tensorflow"}, ValueError, "framework must be one of"),
    ({"precision": "loose"}, ValueError, "precision must be one of"),
    ({"reduction": "gpro"}, ValueError, "reduction must be one of token-mean, "),  # the argument, not "mode"
    ({"reduction": "gpro"}, ValueError, "got 'gpro' (did you mean grpo?)"),
    ({"reduction": "dr_grpo", "l_max": "1024"}, TypeError, "l_max must be a number (a length in tokens), got str "
     "'1024'"),
    ({"framework": "array-api", "dtypes": ["float16"]}, ValueError,
     "dtypes: array-api has none of the dtypes asked for (float16): it holds float32, float64"),
    ({"framework": None}, TypeError, "check takes framework= (one of array-api, jax, numpy, torch, torch-compile) or, "
     "for a per-rank function, sharded= ('torch' or 'jax'): one of the two, got neither"),
    ({"sharded": "torch"}, TypeError, "one of the two, got both"),
    ({"framework": None, "sharded": "mpi"}, ValueError, "sharded must be one of ('torch', 'jax'), got 'mpi'"),
    ({"framework": None, "sharded": "jax", "reduction": "token-mean", "accumulation": True}, ValueError,
     "sharded= runs a per-rank function on a mesh; a per-micro-batch loss on data-parallel ranks is "
     "framework='jax', accumulation=True, ranks=True"),
])
def test_a_bad_argument_is_named(arguments, error, message):
    with pytest.raises(error, match=re.escape(message)):
        check(GOOD, **{"framework": "numpy", **arguments})


def test_fn_must_be_a_function():
    with pytest.raises(TypeError, match="fn must be a function or a 'module:function' string, got int"):
        check(42, framework="numpy")


def test_dtypes_as_one_string_is_read_as_the_command_line_reads_it():
    report = check(GOOD, framework="numpy", dtypes="float32,float64,float32", max_examples=2)
    assert [cell.dtype for cell in report.cells] == ["float32", "float64"] and report.ok


def _normalize(token_log_probs, advantages, token_mask):
    from impls.numpy_impl import sequence_vs_token_normalization

    return sequence_vs_token_normalization(token_log_probs, advantages, token_mask)


class _Callable:
    def __call__(self, token_log_probs, advantages, token_mask):
        return _normalize(token_log_probs, advantages, token_mask)


@pytest.mark.parametrize("fn", [functools.partial(_normalize), _Callable(), lambda *inputs: _normalize(*inputs)],
                         ids=["partial", "callable-instance", "lambda"])
def test_workers_name_a_function_they_cannot_import_as_it_is(fn):
    with pytest.raises(ValueError, match="workers= needs a function importable by its module and name") as raised:
        check(fn, framework="numpy", workers=1)
    assert "functools.'" not in str(raised.value) and "is not (" in str(raised.value)
    assert "partial" in str(raised.value) or "_Callable" in str(raised.value) or "<lambda>" in str(raised.value)


def test_ranks_name_themselves_when_they_cannot_import_the_function():
    def chunk_loss(token_losses, token_mask, *, step_masks, group, accumulation_steps):
        raise AssertionError("never called")

    with pytest.raises(ValueError, match=r"^ranks=True needs a function importable") as raised:
        check(chunk_loss, framework="torch", reduction="token-mean", accumulation=True, ranks=True)
    assert "workers" not in str(raised.value)


def _chunk_loss_of_mode(token_losses, token_mask, *, step_masks, group, accumulation_steps, mode):
    raise AssertionError("never called")


def test_a_partial_that_ranks_cannot_import_is_named_whole_with_the_way_round_it():
    """A trainer's CI binds the mode with a partial: the refusal shows that partial as it was written (not cut
    inside a string) and says what to write instead."""
    fn = functools.partial(_chunk_loss_of_mode, mode="token-mean")
    with pytest.raises(ValueError, match=r"^ranks=True needs a function importable") as raised:
        check(fn, framework="torch", reduction="token-mean", accumulation=True, ranks=True)
    assert "functools.partial(_chunk_loss_of_mode, mode='token-mean') is not (" in str(raised.value)
    assert "a function there that calls yours with the arguments a partial or a lambda binds" in str(raised.value)


RANK_FORM = """
def chunk_loss(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    raise AssertionError("never called: the ranks do not start")
"""


# A call that starts processes (each of which imports the calling script), and the module its function is in.
PROCESS_CALLS = pytest.mark.parametrize(("source", "call"), [
    ("", f'check({GOOD!r}, framework="numpy", dtypes=["float32"], max_examples=2, workers=1)'),
    (RANK_FORM, 'check(losses.chunk_loss, framework="torch", reduction="token-mean", accumulation=True, ranks=True, '
                'dtypes=["float32"], max_examples=2)'),
], ids=["workers", "ranks"])


def _run_unguarded(tmp_path: Path, source: str, module_level: str) -> subprocess.CompletedProcess:
    """A script whose module level is `module_level`, with no main guard, run as a fresh Python process; its
    function's module `losses.py` holds `source` (ranks import the function from its module)."""
    (tmp_path / "losses.py").write_text(source)
    script = tmp_path / "trainer_test.py"
    script.write_text(f"from fuzz import check\nimport losses\n\n{module_level}")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1 and "verdict" not in result.stdout, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last and "before it started" in last, result.stderr[-3000:]
    return result


@PROCESS_CALLS
def test_a_script_without_a_main_guard_is_told_so_instead_of_failing_its_function(tmp_path, source, call):
    _run_unguarded(tmp_path, source, f"report = {call}\nprint('verdict', report.ok)\n")


@PROCESS_CALLS
def test_an_unguarded_script_is_not_run_again_in_the_processes_it_starts(tmp_path, source, call):
    """A script whose module level runs an in-process check before one that starts processes: each new process
    imports the script, and its first check() is refused there at once instead of running that check again."""
    first = f"check({GOOD!r}, framework='numpy', dtypes=['float32'], max_examples=2)\n"
    result = _run_unguarded(tmp_path, source, f"{first}print('first check done', flush=True)\nreport = {call}\n"
                            "print('verdict', report.ok)\n")
    assert result.stdout.count("first check done") == 1, result.stdout + result.stderr[-3000:]
    assert "check() was called while this process was starting" in result.stderr, result.stderr[-3000:]


def test_a_users_own_processes_may_import_a_script_that_checks_at_module_level(tmp_path):
    """Only the suite's own starting processes refuse a check(): a user's spawned pool worker that imports such a
    script runs its check again (slowly, as multiprocessing makes it) and then does its work."""
    script = tmp_path / "trainer_test.py"
    script.write_text(f"import multiprocessing\nfrom fuzz import check\n\n"
                      f"check({GOOD!r}, framework='numpy', dtypes=['float32'], max_examples=2)\n\n"
                      "def square(x):\n    return x * x\n\n"
                      "if __name__ == '__main__':\n"
                      "    with multiprocessing.get_context('spawn').Pool(1) as pool:\n"
                      "        print('pool gave', pool.map(square, [3]))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0 and "pool gave [9]" in result.stdout, result.stdout + result.stderr[-3000:]


def _torch_rank_form(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    raise AssertionError("never called: the call shape is refused first")


def _agg_loss(loss_mat, loss_mask, loss_agg_mode):  # verl's signature: the mode is a third argument
    raise AssertionError("never called: the call shape is refused first")


@pytest.mark.parametrize(("fn", "options", "message"), [
    (_agg_loss, {"reduction": "token-mean"},
     "fn: _agg_loss cannot be called as the reduction contract calls it, fn(token_losses, token_mask) -> loss: "
     "missing a required argument: 'loss_agg_mode'; bind it and check that: `functools.partial(_agg_loss, "
     "loss_agg_mode=...)` or a lambda (for the command line, in a file of yours)"),
    (functools.partial(_agg_loss, loss_agg_mode="token-mean"), {}, "too many positional arguments; a function of "
     "(token_losses, token_mask) -> loss is a loss reduction: declare its mode (--reduction MODE on the command "
     "line, reduction=... in check)"),
    (functools.partial(_agg_loss, loss_agg_mode="token-mean"), {"reduction": "token-mean", "accumulation": True},
     "got an unexpected keyword argument 'num_tokens'"),  # no advice to declare the mode it declares
    (_torch_rank_form, {"reduction": "token-mean", "accumulation": True},
     "missing a required argument: 'step_masks'; it takes the keywords of a rank form on torch's ranks (step_masks, "
     "group, accumulation_steps): check it there (--framework torch --ranks on the command line, "
     "framework=\"torch\", ranks=True in check)"),
])
def test_a_function_that_cannot_take_the_contracts_call_is_refused_before_fuzzing(fn, options, message):
    with pytest.raises(TypeError, match=re.escape(message) + "$"):  # the whole message's end: no other advice
        check(fn, framework="numpy", **options)


def _supplies_the_mode(f):  # a decorator that binds the wrapped function's extra argument
    @functools.wraps(f)
    def wrapper(token_losses, token_mask):
        return f(token_losses, token_mask, "token-mean")
    return wrapper


@pytest.mark.parametrize(("fn", "contract"), [
    (functools.partial(_agg_loss, loss_agg_mode="token-mean"), "reduction"),
    (_supplies_the_mode(_agg_loss), "reduction"),  # the wrapper's signature is the one the call meets
    (lambda *arrays, **keywords: None, "accumulation"),
    (lambda token_losses, token_mask, scale=1.0, **keywords: None, "accumulation"),
    (lambda lp, adv, mask: None, "magnitude"),
])
def test_any_signature_that_takes_the_call_passes_the_shape_check(fn, contract):
    from fuzz.loader import check_call_shape
    from reference.contracts import get_contract

    check_call_shape(fn, get_contract(contract), "fn")  # raises nothing


def _in_process_form(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    raise AssertionError("never called: the rank form's call shape is refused first")


def test_the_in_process_form_is_refused_on_ranks_before_any_rank_starts():
    pytest.importorskip("torch")
    with pytest.raises(TypeError, match=re.escape("fn: _in_process_form cannot be called as its ranks call it, "
                                                  "fn(token_losses, token_mask, *, step_masks, group, "
                                                  "accumulation_steps): missing a required argument: 'num_tokens'")):
        check(_in_process_form, framework="torch", reduction="token-mean", accumulation=True, ranks=True)


def test_gradients_are_checked_by_default_wherever_the_framework_differentiates():
    forward_only = check(GOOD, framework="numpy", dtypes=["float32"], max_examples=2)
    assert [cell.check for cell in forward_only.cells] == ["forward"]
    with pytest.raises(ValueError, match="gradients=True needs autograd, and numpy has none"):
        check(GOOD, framework="numpy", gradients=True)
    pytest.importorskip("torch")
    both = check("impls.torch_eager:sequence_vs_token_normalization", framework="torch", dtypes=["float32"],
                 max_examples=2, gradient_examples=2)
    assert sorted(cell.check for cell in both.cells) == ["forward", "gradients"] and both.ok
    told = check("impls.torch_eager:sequence_vs_token_normalization", framework="torch", dtypes=["float32"],
                 max_examples=2, gradients=False)
    assert [cell.check for cell in told.cells] == ["forward"]


def _check_in_a_pool_worker(arguments: dict) -> str:
    """What check raises in a multiprocessing.Pool worker (a daemon), as text."""
    try:
        check(**arguments)
    except RuntimeError as error:
        return f"RuntimeError: {error}"
    return "no error"


@pytest.mark.parametrize(("arguments", "message"), [
    ({"fn": GOOD, "framework": "numpy", "dtypes": ["float32"], "max_examples": 2, "workers": 1},
     "workers= starts processes, and this process is a daemon (a multiprocessing.Pool worker)"),
    ({"fn": "tests.corpus.accumulation.torch_ranks_sequence_mean_one_over_g:loss_normalization",
      "framework": "torch", "reduction": "seq-mean-token-mean", "accumulation": True, "ranks": True,
      "dtypes": ["float32"], "max_examples": 1},
     "ranks=True starts processes, and this process is a daemon (a multiprocessing.Pool worker)"),
], ids=["workers", "ranks"])
def test_processes_asked_for_in_a_pool_worker_are_refused_with_the_reason(arguments, message):
    if arguments.get("ranks"):
        pytest.importorskip("torch")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        raised = pool.apply(_check_in_a_pool_worker, (arguments,))
    assert raised.startswith("RuntimeError: " + message), raised


def test_a_target_that_is_no_function_is_named_with_its_type(tmp_path):
    from fuzz.loader import LoadError

    (tmp_path / "settings.py").write_text("L_MAX = 1024\n")
    with pytest.raises(LoadError, match=r"settings.py:L_MAX is an int, not a function$"):
        check(f"{tmp_path / 'settings.py'}:L_MAX", framework="numpy")


@pytest.mark.parametrize(("value", "message"), [
    ("float8,float32", "argument --dtypes: unknown 'float8'; choose a comma-separated subset of float16, bfloat16, "
                       "float32, float64"),
    (",", "argument --dtypes: nothing given; choose a comma-separated subset of"),
])
def test_a_selection_option_names_what_it_does_not_know_once(value, message, capsys):
    from fuzz.cli import check_parser

    with pytest.raises(SystemExit):
        check_parser().parse_args([GOOD, "--framework", "numpy", "--dtypes", value])
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the usage
    assert message in error and error.count("--dtypes") == 1, error
