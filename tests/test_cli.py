"""`python -m fuzz check`: exit 0 conforms, 1 counterexample (a snippet that reproduces), 2 usage/load error."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fuzz.judge.anchors import FORWARD_FIXED_CASES
from fuzz.version import VERSION

ROOT = Path(__file__).resolve().parents[1]


def run_fuzz(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "fuzz", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)


def write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("does/not/exist.py:f", "does/not/exist.py: no such file"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("reference.dtypes:DTYPE_NAMES", "reference.dtypes:DTYPE_NAMES is a tuple, not a function"),
        ("reference.dtypes:nothing_here", "reference.dtypes has no attribute 'nothing_here'"),
        ("justaname", "TARGET must look like package.module:function"),
    ],
)
def test_load_errors_exit_2_with_a_clear_message(target, message):
    result = run_fuzz("check", target, "--framework", "numpy")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_a_function_name_that_is_not_there_is_answered_with_the_functions_that_are(tmp_path):
    path = write(tmp_path, "loss.py", """
        from functools import partial
        from math import fsum

        def agg_loss(token_losses, token_mask, mode):
            return token_losses

        def _helper():
            pass

        token_mean = partial(agg_loss, mode="token-mean")
    """)
    result = run_fuzz("check", f"{path}:loss", "--framework", "numpy")
    assert result.returncode == 2, result.stderr
    # a mode bound with partial is a target too; what the module imports (fsum, partial) is not its own
    assert f"{path} has no attribute 'loss' (it defines agg_loss, token_mean)" in result.stderr, result.stderr


def test_a_module_that_raises_on_import_exits_2(tmp_path):
    path = write(tmp_path, "broken.py", "raise RuntimeError('boom at import')\n")
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy")
    assert result.returncode == 2
    assert "raised on import: RuntimeError: boom at import" in result.stderr


def test_usage_errors_exit_2():
    assert run_fuzz("check", "impls.numpy_impl:normalize").returncode == 2  # --framework missing
    assert run_fuzz("--dtypes", "float8").returncode == 2
    jobs = run_fuzz("check", "impls.numpy_impl:normalize", "--framework", "numpy", "--jobs", "0")
    assert jobs.returncode == 2 and "argument --jobs: must be a positive integer" in jobs.stderr
    misspelled = run_fuzz("chek", "impls.numpy_impl:normalize", "--framework", "numpy")
    assert misspelled.returncode == 2 and "unknown subcommand 'chek' (did you mean check?)" in misspelled.stderr


REDUCTION = ["--reduction", "token-mean", "--dtypes", "float32"]
BOTH = {"forward", "gradients"}


@pytest.mark.parametrize(("command", "checks"), [
    (["impls.torch_eager_reduction:loss_reduction", "--framework", "torch", *REDUCTION], BOTH),
    (["impls.torch_eager_reduction:loss_reduction", "--framework", "torch-compile", *REDUCTION], BOTH),
    (["impls.jax_jit_reduction:loss_reduction", "--framework", "jax", *REDUCTION], BOTH),
    (["impls.torch_eager_reduction:loss_reduction", "--framework", "torch", "--no-gradients", *REDUCTION],
     {"forward"}),
    (["impls.numpy_reduction:loss_reduction", "--framework", "numpy", *REDUCTION], {"forward"}),
    (["impls.array_api_reduction:loss_reduction", "--framework", "array-api", *REDUCTION], {"forward"}),
    (["impls.torch_eager_accumulation:chunk_loss", "--framework", "torch", "--accumulation", *REDUCTION], BOTH),
    (["impls.torch_distributed:sequence_vs_token_normalization", "--sharded", "torch", "--dtypes", "float32"], BOTH),
], ids=["torch", "torch-compile", "jax", "no-gradients", "numpy", "array-api", "accumulation", "sharded"])
def test_gradients_are_checked_by_default_wherever_the_framework_differentiates(command, checks):
    """A loss is there to be differentiated: `check` fuzzes the backward too, unless told --no-gradients, wherever
    the framework has autograd (the cells planned here, none run)."""
    from fuzz.cli import check_parser, check_tasks

    framework = command[command.index("--framework") + 1] if "--framework" in command else "torch"
    pytest.importorskip({"torch-compile": "torch", "array-api": "array_api_compat"}.get(framework, framework))
    assert {task.check for task in check_tasks(check_parser().parse_args(command))} == checks


def test_gradients_asked_of_a_framework_without_autograd_are_refused():
    result = run_fuzz("check", "impls.numpy_reduction:loss_reduction", "--framework", "numpy", "--reduction",
                      "token-mean", "--gradients")
    assert result.returncode == 2 and "--gradients needs autograd, and numpy has none" in result.stderr


NUMPY_SCALAR_LOSSES = """
        import numpy as np
        def token_mean(losses, mask):  # NumPy's own reductions return a NumPy scalar (np.float32), not a 0-d array
            acc = np.float64 if losses.dtype == np.float64 else np.float32
            return np.where(mask, losses, 0).sum(dtype=acc) / max(int(mask.sum()), 1)
        def padded_width(losses, mask):  # BUG: the padded width as the token count
            acc = np.float64 if losses.dtype == np.float64 else np.float32
            return np.where(mask, losses, 0).sum(dtype=acc) / max(losses.size, 1)
"""


def test_a_numpy_scalar_loss_is_a_0_d_result_and_its_values_are_judged(tmp_path):
    write(tmp_path, "scalar_losses.py", NUMPY_SCALAR_LOSSES)
    options = ["--framework", "numpy", "--reduction", "token-mean", "--dtypes", "float32,bfloat16"]
    correct = run_fuzz("check", "scalar_losses.py:token_mean", *options, cwd=tmp_path)
    assert correct.returncode == 0, correct.stdout + correct.stderr
    bug = run_fuzz("check", "scalar_losses.py:padded_width", *options, "--json", "r.json", cwd=tmp_path)
    assert bug.returncode == 1, bug.stdout + bug.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    kinds = {b["kind"] for cell in report["cells"] for b in cell["bugs"]}
    assert kinds == {"loss out of tolerance"}, kinds
    # the run again, as it was typed
    assert report["command_line"] == ("python -m fuzz check scalar_losses.py:padded_width " + " ".join(options)
                                      + " --json r.json"), report["command_line"]


@pytest.mark.parametrize(("options", "message"), [
    (["--rows", "all"], "--rows is a parameter of the loss reduction: it needs --reduction too"),
    (["--reduction", "token-mean", "--dp-reduce", "sum"], "--dp-reduce is a convention of the per-chunk loss: it "
                                                          "needs --accumulation too"),
    (["--reduction", "fixed-length"], "mode needs --l-max, its positive constant L_max"),
    (["--reduction", "gpro"], "error: --reduction must be one of token-mean, "),  # the option, not "mode"
])
def test_a_declared_parameter_that_needs_another_names_both_options(options, message):
    result = run_fuzz("check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy", *options)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_declared_parameter_the_mode_does_not_read_is_noted_and_set_aside(tmp_path):
    write(tmp_path, "scalar_losses.py", NUMPY_SCALAR_LOSSES)
    result = run_fuzz("check", "scalar_losses.py:token_mean", "--framework", "numpy", "--reduction", "token-mean",
                      "--l-max", "1000", "--rows", "nonempty", "--dtypes", "float32", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("note: --l-max is read only by seq-mean-token-sum-norm (fixed-length): token-mean does not divide by "
            "L_max, so it is set aside") in result.stderr
    assert "note: --rows says what D counts in the modes that divide by D: token-mean has no D" in result.stderr
    fixed = run_fuzz("check", "scalar_losses.py:token_mean", "--framework", "numpy", "--reduction", "fixed-length",
                     "--l-max", "1000", "--rows", "nonempty", "--dtypes", "float32", "--max-examples", "5",
                     cwd=tmp_path)
    assert "note:" not in fixed.stderr, fixed.stderr


def test_dtypes_the_framework_does_not_hold_are_refused_instead_of_checking_nothing():
    result = run_fuzz("check", "impls.array_api_impl:sequence_vs_token_normalization", "--framework", "array-api",
                      "--dtypes", "float16,bfloat16")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "argument --dtypes: array-api has none of the dtypes asked for (float16, bfloat16)" in result.stderr


def test_a_correct_function_conforms(tmp_path):
    result = run_fuzz("check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy",
                      "--json", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] and len(report["cells"]) == 4
    assert report["versions"]["lossnorm-difftest"] == VERSION  # a verdict names the suite that reached it
    # the default 40 drawn examples, then the forward cell's fixed cases its dtype checks (the draws found nothing;
    # NumPy code is not compiled)
    fixed = {cell["dtype"]: sum(anchor.checked_by(cell["dtype"], compiled=False) for anchor in FORWARD_FIXED_CASES.last)
             for cell in report["cells"]}
    assert fixed == {"float16": 4, "bfloat16": 4, "float32": 3, "float64": 3}
    assert all(cell["examples"] == 40 + fixed[cell["dtype"]] for cell in report["cells"])


PADDED_WIDTH_BUG = """
        import numpy as np
        def f(lp, adv, mask):
            acc = np.float64 if lp.dtype == np.float64 else np.float32
            s = adv.astype(acc) * np.where(mask, lp, 0).sum(-1, dtype=acc)
            a = s / max(lp.shape[1], 1)   # BUG: the padded width, not the selected count
            d = np.abs(a).sum()
            r = np.abs(s).sum() / d if d > 0 else acc(0)
            return {"sequence_summed": s.astype(lp.dtype), "token_averaged": a.astype(lp.dtype),
                    "magnitude_ratio": np.asarray(r).astype(lp.dtype)}
    """


def test_a_bug_gives_exit_1_and_a_snippet_that_reproduces_it(tmp_path):
    path = write(tmp_path, "padded.py", PADDED_WIDTH_BUG)
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--dtypes", "float32",
                      "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    snippet = json.loads((tmp_path / "r.json").read_text())["cells"][0]["snippet"]
    assert "token_averaged" in snippet and "FAILED" in snippet
    replay = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, cwd=tmp_path)
    assert replay.returncode == 1 and "AssertionError" in replay.stderr and "token_averaged" in replay.stderr


def test_fail_fast_over_two_workers_stops_at_a_failing_cell(tmp_path):
    path = write(tmp_path, "padded.py", PADDED_WIDTH_BUG)
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--jobs", "2", "--fail-fast",
                      "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    cells = json.loads((tmp_path / "r.json").read_text())["cells"]
    # every cell fails: the first to finish ends the run, with any that finished at the same moment (at most one per
    # worker), of the 4 planned
    assert 1 <= len(cells) <= 2 and all(not cell["ok"] and cell["snippet"] for cell in cells), cells


def test_a_function_that_kills_its_worker_fails_instead_of_hanging(tmp_path):
    path = write(tmp_path, "dies.py", "import os\ndef f(lp, adv, mask):\n    os._exit(3)\n")
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--jobs", "2", "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    cells = json.loads((tmp_path / "r.json").read_text())["cells"]
    assert len(cells) == 4
    assert all("worker process exited with status 3 during a forward call" in cell["failures"][0] for cell in cells)
    assert all("token_log_probs =" in cell["snippet"] for cell in cells)  # the case it was running


MISBEHAVING = """
        import ctypes
        import time

        import numpy as np

        def segfaults(lp, adv, mask):
            ctypes.string_at(0)  # reads address 0: SIGSEGV

        def sleeps(lp, adv, mask):
            time.sleep(3600)

        def spins_in_c(lp, adv, mask):  # never returns, and never lets a signal handler run
            ctypes.CDLL(None).pause()

        def forgets_return(lp, adv, mask):
            np.where(mask, lp, 0).sum(-1)

        def returns_tuple(lp, adv, mask):
            return (lp.sum(-1), lp.sum(-1), lp.sum())

        def returns_list(lp, adv, mask):
            return [lp]

        def returns_int(lp, adv, mask):
            return 0

        def returns_dict_of_strings(lp, adv, mask):
            return {"sequence_summed": "a", "token_averaged": "b", "magnitude_ratio": "c"}

        def returns_dict_of_wrong_sizes(lp, adv, mask):
            return {"sequence_summed": lp, "token_averaged": adv[:0], "magnitude_ratio": lp}
    """


@pytest.mark.parametrize("dtypes", ["float32", "float32,float64"], ids=["one-cell", "two-cells"])
@pytest.mark.parametrize(("function", "failure"), [
    ("segfaults", "worker process was killed by SIGSEGV during a forward call"),
    ("forgets_return", "returned NoneType, expected a dict"),
])
def test_a_crash_or_a_forgotten_return_is_the_functions_failure(tmp_path, function, failure, dtypes):
    path = write(tmp_path, "misbehaving.py", MISBEHAVING)
    result = run_fuzz("check", f"{path}:{function}", "--framework", "numpy", "--dtypes", dtypes, "--jobs", "2",
                      "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    cells = json.loads((tmp_path / "r.json").read_text())["cells"]
    assert len(cells) == dtypes.count(",") + 1
    assert all(failure in cell["failures"][0] and "token_log_probs =" in cell["snippet"] for cell in cells)


@pytest.mark.parametrize("function", ["returns_tuple", "returns_list", "returns_int", "returns_dict_of_strings",
                                      "returns_dict_of_wrong_sizes"])
def test_every_wrong_return_value_is_the_functions_failure(tmp_path, function):
    path = write(tmp_path, "misbehaving.py", MISBEHAVING)
    result = run_fuzz("check", f"{path}:{function}", "--framework", "numpy", "--dtypes", "float32", "--jobs", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "=== FAIL" in result.stdout


@pytest.mark.parametrize("function", ["sleeps", "spins_in_c"])
def test_a_call_that_never_returns_fails_within_the_time_limit(tmp_path, function):
    path = write(tmp_path, "misbehaving.py", MISBEHAVING)
    started = time.monotonic()
    result = run_fuzz("check", f"{path}:{function}", "--framework", "numpy", "--dtypes", "float32", "--timeout", "2",
                      "--json", str(tmp_path / "r.json"))
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    cell = json.loads((tmp_path / "r.json").read_text())["cells"][0]
    # The cell ends at its limit (its own clock: what starting Python costs on a loaded machine is not in it), and
    # the run does not wait out the call (an hour), whatever the machine's load.
    assert cell["seconds"] < 2 + 3, cell["seconds"]
    assert elapsed < 2 + 120, elapsed
    assert "did not return within 2 s" in cell["failures"][0] and "worker process killed" in cell["failures"][0]
    assert cell["counterexample"] and f"= {function}(token_log_probs, advantages, token_mask)" in cell["snippet"]
    # its progress line, as every cell has one (the killed worker cannot write it): no silent minutes
    line = next(line for line in result.stderr.splitlines() if "FAIL" in line)
    assert f"misbehaving.py:{function} |" in line and "cpu float32 | forward" in line, result.stderr


def test_check_writes_nothing_where_it_runs(tmp_path):
    """No `.hypothesis/` (Hypothesis' caches), no `__pycache__/`: `git status` in the user's directory stays clean."""
    write(tmp_path, "padded.py", PADDED_WIDTH_BUG)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "padded.py"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "f"], cwd=tmp_path, check=True)
    result = run_fuzz("check", "padded.py:f", "--framework", "numpy", "--dtypes", "float32", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status


def test_a_function_that_raises_system_exit_is_a_failure_not_an_exit(tmp_path):
    path = write(tmp_path, "exits.py", "def f(lp, adv, mask):\n    raise SystemExit(0)\n")
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--jobs", "1", "--dtypes", "float32")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "raised SystemExit" in result.stdout


@pytest.mark.parametrize("raised", ["KeyboardInterrupt()", "Stop()"])
def test_a_function_that_raises_a_base_exception_is_a_failure_not_an_internal_error(tmp_path, raised):
    """KeyboardInterrupt or a user's own BaseException from the function: its failure (exit 1), not the suite's."""
    path = write(tmp_path, "interrupts.py", f"class Stop(BaseException):\n    pass\n\ndef f(lp, adv, mask):\n"
                                             f"    raise {raised}\n")
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--jobs", "1", "--dtypes", "float32")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"raised {raised[:-2]}" in result.stdout


def test_every_command_has_help():
    top = run_fuzz("--help").stdout
    assert "campaign" in top and "check" in top and "Exit 0" in top
    assert "conformance matrix" in run_fuzz("campaign", "--help").stdout
    assert "--framework" in run_fuzz("check", "--help").stdout
    assert "--timeout SECONDS" in run_fuzz("check", "--help").stdout


@pytest.mark.parametrize("command", [("fuzz", "check"), ("bench",)], ids=["check", "bench"])
def test_the_reduction_help_lists_every_spelling_the_contract_accepts(command):
    """--reduction's help is written from the contract's mode parameter: every mode and alias it accepts."""
    from reference.contracts import get_contract

    mode = get_contract("reduction").parameter("mode")
    said = subprocess.run([sys.executable, "-m", *command, "--help"], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "1000"}, timeout=120).stdout
    line = next(line for line in said.splitlines() if "--reduction MODE " in line)
    listed = {word.strip(",;()") for word in line.split()}
    assert set(mode.choices) | set(mode.aliases) <= listed, line


@pytest.mark.parametrize("command", [["python", "-m", "fuzz"], ["python", "-m", "bench"]], ids=["fuzz", "bench"])
def test_both_commands_print_the_suite_version(command):
    result = subprocess.run([sys.executable, *command[1:], "--version"], cwd=ROOT, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{' '.join(command)} {VERSION}\n"
    if command[-1] == "fuzz":  # after a subcommand or an option too
        for before in (["check"], ["--seed", "1"]):
            late = subprocess.run([sys.executable, "-m", "fuzz", *before, "--version"], cwd=ROOT, capture_output=True,
                                  text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
            assert (late.returncode, late.stdout) == (0, f"python -m fuzz {VERSION}\n"), late.stderr


def test_without_a_subcommand_the_campaign_runs():
    result = run_fuzz("--implementations", "numpy", "--dtypes", "float64", "--max-examples", "5")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Conformance summary" in result.stdout and "numpy" in result.stdout
    assert "every cell conforms" in result.stdout


@pytest.mark.parametrize("command", [
    ["check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy"],
    ["check", "impls.torch_distributed:sequence_vs_token_normalization", "--sharded", "torch"],
    ["--implementations", "numpy"],
], ids=["check", "sharded", "campaign"])
@pytest.mark.parametrize("path", ["/proc/nope/r.json", "", "{tmp}", "{tmp}/missing/r.json", "/proc/r.json"],
                         ids=["no-such-folder", "empty", "a-directory", "missing-folder", "takes-no-file"])
@pytest.mark.parametrize("report", ["--json", "--html"])
def test_an_unwritable_report_path_is_refused_before_any_fuzzing(tmp_path, command, path, report):
    result = run_fuzz(*command, report, path.format(tmp=tmp_path))
    # refused before fuzzing: no cell ran (a progress line per cell on stderr), whatever the machine's load
    assert not re.search(r"^  (ok  |FAIL) ", result.stderr, re.MULTILINE), "refused after fuzzing, not before"
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"argument {report}: cannot write the report there" in result.stderr
    assert "Conformance" not in result.stdout


@pytest.mark.parametrize("command", [
    ["check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy"],
    ["--implementations", "numpy"],
], ids=["check", "campaign"])
def test_json_and_html_naming_one_file_are_refused_before_any_fuzzing(tmp_path, command):
    result = run_fuzz(*command, "--json", str(tmp_path / "report"), "--html", f"{tmp_path}/./report")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--json and --html name the same file" in result.stderr
    assert "Conformance" not in result.stdout and not (tmp_path / "report").exists()


def test_a_report_path_through_a_file_says_the_file_is_no_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    result = run_fuzz("check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy",
                      "--json", str(tmp_path / "notes.txt" / "sub" / "r.json"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in result.stderr


def test_a_read_only_working_directory_is_refused_for_a_relative_report_path(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = run_fuzz("check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy",
                          "--json", "r.json", cwd=folder)
    finally:
        folder.chmod(0o755)
    if os.geteuid() == 0:  # root writes anywhere: the folder is writable to it, and the report is written
        assert result.returncode == 0 and (folder / "r.json").exists(), result.stderr
    else:
        assert result.returncode == 2 and "is not writable" in result.stderr


def test_a_reader_that_closes_the_output_early_loses_neither_the_verdict_nor_the_report(tmp_path):
    """`check ... | head -3`: the pipe closes before the summary is printed; the exit status and --json stand."""
    write(tmp_path, "padded.py", PADDED_WIDTH_BUG)
    process = subprocess.Popen([sys.executable, "-m", "fuzz", "check", "padded.py:f", "--framework", "numpy",
                                "--dtypes", "float32", "--json", "r.json"], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    process.stdout.close()  # the reader is gone before anything is printed
    stderr = process.stderr.read()
    assert process.wait(timeout=600) == 1, stderr
    assert "BrokenPipeError" not in stderr and "internal error" not in stderr
    assert json.loads((tmp_path / "r.json").read_text())["cells"]


def test_the_report_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from fuzz.report.files import write_atomically

    path = tmp_path / "r.json"
    path.write_text("old")

    class Boom(Exception):
        pass

    def fail(*args):
        raise Boom

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(Boom):
        write_atomically(str(path), "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no half file left


def _torch_sees_cuda() -> bool:
    """Whether the torch adapter lists a cuda device (the list the message below names)."""
    from impls.frameworks import load_framework

    try:
        return "cuda" in load_framework("torch").devices()
    except Exception:  # no torch here: the message is another one, and the test says so
        return False


@pytest.mark.parametrize(("command", "message"), [
    pytest.param(["check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "torch", "--devices",
                  "cuda"], "none of the devices asked for (cuda) exists here; the devices here are torch: cpu",
                 marks=pytest.mark.skipif(_torch_sees_cuda(), reason="torch has a cuda device here")),
    (["check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "torch", "--devices", "cpu:1"],
     "none of the devices asked for (cpu:1) exists here; the devices here are torch: cpu"),
    (["--implementations", "numpy", "--devices", "cuda"],
     "none of the devices asked for (cuda) exists here; the devices here are numpy: cpu"),
])
def test_devices_that_do_not_exist_are_named_with_the_ones_that_do(command, message):
    result = run_fuzz(*command)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


def test_a_dtype_named_twice_is_fuzzed_once(tmp_path):
    result = run_fuzz("check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy",
                      "--dtypes", "float32,float32", "--max-examples", "3", "--json", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stderr
    assert [cell["dtype"] for cell in json.loads((tmp_path / "r.json").read_text())["cells"]] == ["float32"]


@pytest.mark.parametrize("folder", [".", "sub"])  # a path with a folder too: not mistaken for a missing file
def test_a_target_with_two_colons_is_explained(tmp_path, folder):
    (tmp_path / folder).mkdir(exist_ok=True)
    write(tmp_path / folder, "targets.py", "raise RuntimeError('must not be imported')\n")
    result = run_fuzz("check", f"{folder}/targets.py::fn", "--framework", "numpy", cwd=tmp_path)
    assert result.returncode == 2
    assert f"did you mean '{folder}/targets.py:fn'" in result.stderr and "must not be imported" not in result.stderr


def test_a_file_target_imports_the_modules_beside_it_from_any_directory(tmp_path):
    trainer = tmp_path / "my_trainer"
    trainer.mkdir()
    write(trainer, "helpers.py", "from impls.numpy_impl import sequence_vs_token_normalization as normalize\n")
    write(trainer, "loss.py", """
        import helpers

        def loss(lp, adv, mask):
            return helpers.normalize(lp, adv, mask)
    """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_fuzz("check", str(trainer / "loss.py") + ":loss", "--framework", "numpy", "--dtypes", "float32",
                      "--max-examples", "3", "--jobs", "1", cwd=elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_sharded_check_of_a_framework_that_is_missing_exits_2(tmp_path):
    # A Python where `import torch` fails, as on a machine without it.
    write(tmp_path, "torch.py", "raise ImportError('No module named torch (simulated)')\n")
    result = subprocess.run([sys.executable, "-m", "fuzz", "check", "impls.torch_distributed:f", "--sharded", "torch"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "framework torch is unavailable here" in result.stderr and "Traceback" not in result.stderr


def test_compiled_code_is_cached_in_the_users_cache_folder_not_the_working_directory(tmp_path):
    """XLA's persistent cache (and inductor's) go to $XDG_CACHE_HOME/lossnorm-difftest: a second run reuses
    them; the directory the command runs in gets nothing."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    result = subprocess.run([sys.executable, "-m", "fuzz", "check", "impls.jax_jit_reduction:loss_reduction",
                             "--framework", "jax", "--reduction", "token-mean", "--dtypes", "float32",
                             "--max-examples", "3", "--no-gradients"], cwd=work, capture_output=True, text=True,
                            timeout=600,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert list((cache / "lossnorm-difftest" / "jax").iterdir()), "nothing compiled was cached"
    assert list(work.iterdir()) == []


def test_a_function_that_cannot_take_the_contracts_call_exits_2_before_fuzzing(tmp_path):
    path = write(tmp_path, "verl_like.py", "def agg_loss(loss_mat, loss_mask, loss_agg_mode):\n    return 0\n")
    result = run_fuzz("check", f"{path}:agg_loss", "--framework", "numpy", "--reduction", "token-mean")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot be called as the reduction contract calls it, fn(token_losses, token_mask) -> loss: missing a " \
           "required argument: 'loss_agg_mode'" in result.stderr
    assert "FAIL" not in result.stdout + result.stderr  # no cell ran


def test_the_in_process_form_on_ranks_exits_2_before_any_rank_starts(tmp_path):
    pytest.importorskip("torch")
    path = write(tmp_path, "in_process.py", "def loss(token_losses, token_mask, *, num_tokens, num_sequences, "
                                              "dp_size, accumulation_steps):\n    return 0\n")
    result = run_fuzz("check", f"{path}:loss", "--framework", "torch", "--reduction", "token-mean", "--accumulation",
                      "--ranks")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot be called as its ranks call it, fn(token_losses, token_mask, *, step_masks, group, " \
           "accumulation_steps): missing a required argument: 'num_tokens'" in result.stderr


def test_a_per_chunk_loss_under_sharded_is_pointed_to_its_own_ranks(tmp_path):
    """--sharded is another engine (a per-rank function on a mesh): with --accumulation the user meant the
    per-chunk loss on data-parallel ranks, and is told that command rather than a signature mismatch."""
    path = write(tmp_path, "in_process.py", "def loss(token_losses, token_mask, *, num_tokens, num_sequences, "
                                              "dp_size, accumulation_steps):\n    return 0\n")
    result = run_fuzz("check", f"{path}:loss", "--sharded", "jax", "--reduction", "token-mean", "--accumulation")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "a per-micro-batch loss on data-parallel ranks is --framework jax --accumulation --ranks" in result.stderr


def test_a_rank_forms_heading_and_report_name_its_ranks_and_each_ranks_own_count():
    """The heading says how the function ran (micro-batches, or which ranks); a count each rank makes of its own
    micro-batches, never all-reduced, is named as that where G > 1 (with G = 1 a rank is one micro-batch)."""
    pytest.importorskip("torch")
    entry = ROOT / "tests" / "corpus" / "accumulation" / "torch_ranks_count_not_all_reduced.py"
    ranks = run_fuzz("check", f"{entry}:loss_normalization", "--framework", "torch", "--reduction", "token-mean",
                     "--accumulation", "--ranks", "--dtypes", "float64", "--no-gradients", "--jobs", "1")
    assert ranks.returncode == 1, ranks.stdout + ranks.stderr
    assert "(torch, on torch.distributed ranks under DDP; accumulation (token-mean" in " ".join(ranks.stdout.split())
    assert "with R = 2, G = 2: does each rank divide by its own token count (or rows), not the step's all-reduced " \
           "over the ranks?" in " ".join(ranks.stdout.split())
    micro = run_fuzz("check", "impls.torch_eager_accumulation:chunk_loss", "--framework", "torch", "--reduction",
                     "token-mean", "--accumulation", "--dtypes", "float64", "--no-gradients", "--max-examples", "5")
    assert micro.returncode == 0, micro.stdout + micro.stderr
    assert "(torch, over micro-batches; accumulation (token-mean" in " ".join(micro.stdout.split())


TUNIX_SEQUENCE_MEAN = """
import numpy as np


def aggregate_loss(per_token_loss, completion_mask):
    # tunix's sequence-mean-token-mean: the rows' means over the rows with a selected token
    acc = np.float64 if per_token_loss.dtype == np.float64 else np.float32
    counts = completion_mask.sum(-1)
    means = np.where(completion_mask, per_token_loss.astype(acc), 0).sum(-1) / np.maximum(counts, 1)
    return np.asarray(means.sum() / max(int((counts > 0).sum()), 1), dtype=acc)
"""


def test_a_trainers_spelling_checks_its_convention_and_says_so(tmp_path):
    path = write(tmp_path, "tunix_like.py", TUNIX_SEQUENCE_MEAN)
    result = run_fuzz("check", f"{path}:aggregate_loss", "--framework", "numpy", "--reduction",
                      "sequence-mean-token-mean", "--max-examples", "10")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reduction (seq-mean-token-mean, rows=nonempty)" in result.stdout
    assert "note: --reduction sequence-mean-token-mean is a trainer's spelling that also means rows=nonempty" \
           in result.stderr
    declared = run_fuzz("check", f"{path}:aggregate_loss", "--framework", "numpy", "--reduction",
                        "sequence-mean-token-mean", "--rows", "all", "--max-examples", "10")
    assert declared.returncode == 1 and "note:" not in declared.stderr, declared.stdout + declared.stderr


def test_a_hints_lambda_is_checked_on_the_command_line_as_the_hint_says(tmp_path):
    """A hint shows a lambda (here: code written for integer masks, checked with the mask converted); the command
    line loads FILE:function, so the hint also says how to name it in a file, and that file, checked so, conforms."""
    pytest.importorskip("torch")
    source = """
        import torch

        def trl_style(token_losses, token_mask):
            padding = 1 - token_mask  # written for TRL's integer completion_mask
            wide = token_losses.to(torch.promote_types(token_losses.dtype, torch.float32))
            return wide.masked_fill(padding.bool(), 0).sum() / token_mask.sum().clamp(min=1)
    """
    path = write(tmp_path, "mine.py", source)
    budget = ("--framework", "torch", "--reduction", "token-mean", "--dtypes", "float32", "--max-examples", "5")
    first = run_fuzz("check", f"{path}:trl_style", *budget)
    said = " ".join(first.stdout.split())  # the hint's wrapped lines joined
    assert first.returncode == 1, first.stdout + first.stderr
    hint = re.search(r"`(lambda [^`]*)`, fn your function \(on the command line: `(\w+) = lambda \.\.\.` in a file "
                     r"of yours, checked as FILE:(\w+);", said)
    assert hint and hint[2] == hint[3], said
    path.write_text(textwrap.dedent(source) + f"\n\n{hint[2]} = {hint[1].replace('fn(', 'trl_style(')}\n")
    second = run_fuzz("check", f"{path}:{hint[2]}", *budget)
    assert second.returncode == 0, second.stdout + second.stderr
