"""`python -m bench`: what a run writes goes to the user's directory, and bad options are refused at once (exit 2)
with the option's name and its valid choices; a run that times nothing fails with the reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SIGINT_AS_A_TERMINAL_SETS_IT

ROOT = Path(__file__).resolve().parents[1]
# Python's own cache of an imported module (pip precompiles these for an installed copy). pytest's cache of a
# rewritten test module is named NAME.cpython-311-pytest-9.2.0.pyc, so it does not match.
IMPORT_CACHE = re.compile(r"(^|/)__pycache__/[A-Za-z0-9_]+\.cpython-\d+\.pyc$")
TINY = ("--implementations", "numpy", "--sizes", "small", "--dtypes", "float32", "--devices", "cpu", "--quick")
# Printed at exit by the wrapper in `run_bench`: which frameworks the command had imported by then.
IMPORTED = re.compile(r"^frameworks imported: (.*)$", re.MULTILINE)


def run_bench(*args: str, cwd: Path, pythonpath: Path = ROOT, env: dict[str, str] | None = None,
              preexec_fn: Callable[[], object] | None = None) -> subprocess.CompletedProcess[str]:
    # `python -m bench` itself (runpy, as -m does), plus an exit hook that reports the frameworks imported.
    wrapper = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('frameworks imported:', sorted({'torch', 'jax'} & set(sys.modules)),"
        " file=sys.stderr))\n"
        "sys.argv = ['bench', *sys.argv[1:]]\n"
        "runpy.run_module('bench', run_name='__main__', alter_sys=True)\n"
    )
    # No PYTHONDONTWRITEBYTECODE: what the run would write on a user's machine is written here too.
    base = {"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", wrapper, *args], cwd=cwd, capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=300, preexec_fn=preexec_fn)


def imported(result: subprocess.CompletedProcess[str]) -> str:
    match = IMPORTED.search(result.stderr)
    assert match, result.stderr
    return match.group(1)


def git_status(*paths: str, every_file: bool) -> set[str]:
    command = ["git", "status", "--porcelain", "--ignored", "-z"] + (["-uall"] if every_file else [])
    result = subprocess.run([*command, "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    return {entry[3:] for entry in result.stdout.split("\0") if entry}


def checkout_snapshot() -> set[str]:
    """Every file under bench/ and where a run would write at the root, and the root's own entries."""
    files = git_status("bench", ".benchmarks", ".pytest_cache", "out", every_file=True)
    top = {entry for entry in git_status(every_file=False) if "/" not in entry.rstrip("/")}
    return files | top


def not_import_caches(paths: set[str]) -> set[str]:
    return {path for path in paths if not IMPORT_CACHE.search(path)}


def assert_the_run_wrote_into(directory: Path) -> None:
    assert list((directory / ".benchmarks").glob("*/0001_*.json")), "the run was not autosaved there"
    assert (directory / "out" / "bench" / "pytest-benchmark.json").is_file()
    assert (directory / "out" / "bench" / "skipped.json").is_file()


def test_a_run_from_another_directory_writes_there_and_nothing_into_the_checkout(tmp_path: Path) -> None:
    usable = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    before = checkout_snapshot()
    cpus = ("--cpus", str(usable)) if usable is not None else ()
    result = run_bench(*TINY, *cpus, "--html", "bench.html", "--json", "records.json", cwd=tmp_path)
    new = not_import_caches(checkout_snapshot() - before)
    assert result.returncode == 0, result.stdout + result.stderr
    assert new == set(), f"written into the checkout: {sorted(new)}"
    assert_the_run_wrote_into(tmp_path)
    assert "numpy" in result.stdout and "floor" in result.stdout  # the table
    page, records = (tmp_path / "bench.html").read_text(), json.loads((tmp_path / "records.json").read_text())
    assert "Benchmark report" in page and all(record["implementation"] in page for record in records)
    # README's comparison of saved runs, from the same directory.
    compare = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", "0001", "--group-by=group"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert compare.returncode == 0, compare.stderr
    assert "cpu-float32-small-numpy" in compare.stdout


def test_an_installed_copy_runs_without_the_checkout_config_and_writes_nothing_next_to_itself(tmp_path: Path) -> None:
    # The packages alone, as site-packages holds them: no pyproject.toml next to them. Above them, as above a
    # virtualenv made inside a project, a config that pytest would read for the suite (it looks upwards from the
    # test file), with addopts it cannot parse: the suite's run must not take it.
    site, work = tmp_path / "site", tmp_path / "work"
    for package in ("bench", "impls", "reference"):
        shutil.copytree(ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    work.mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option-here\n")
    before = {str(path.relative_to(site)) for path in site.rglob("*")}
    result = run_bench(*TINY, cwd=work, pythonpath=site)
    new = not_import_caches({str(path.relative_to(site)) for path in site.rglob("*")} - before)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {path for path in new if not path.endswith("__pycache__")} == set(), sorted(new)
    assert_the_run_wrote_into(work)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--sizes", "huge", "unknown size 'huge'; choose from small, medium, large, xl"),
        ("--dtypes", "float8", "unknown dtype 'float8'; choose from float16, bfloat16, float32, float64"),
        ("--devices", "tpu", "unknown device 'tpu'; choose from cpu, cuda"),
        ("--implementations", "numpy,nope", "unknown implementation 'nope'; choose from torch-eager, "
                                            "torch-compile, torch-triton, jax-jit, numpy, array-api"),
        ("--sizes", ",", "no size given; choose from small, medium, large, xl"),
        ("--contracts", "reduction,bogus", "unknown contract 'bogus'; choose from magnitude, reduction"),
        # the accumulation contract's built-ins are per-chunk functions an engine calls: not benchmarked
        ("--contracts", "accumulation", "unknown contract 'accumulation'; choose from magnitude, reduction"),
        ("--reduction", "bogus", "mode must be one of token-mean, seq-mean-token-mean, seq-mean-token-sum-norm, "
                                 "seq-mean-token-sum, token-sum, "),
    ],
    ids=["size", "dtype", "device", "implementation", "empty", "contract", "accumulation", "reduction mode"],
)
def test_an_unknown_name_is_refused_before_any_framework_is_imported(
    tmp_path: Path, option: str, value: str, message: str
) -> None:
    result = run_bench(option, value, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"argument {option}: {message}" in result.stderr
    assert imported(result) == "[]"
    assert list(tmp_path.iterdir()) == []  # refused before the run made its folders


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--contracts", "magnitude", "--reduction", "grpo"),
         "argument --reduction: the reduction contract is not among --contracts magnitude"),
    ],
    ids=["reduction mode without the reduction contract"],
)
def test_options_that_contradict_each_other_are_refused_before_any_framework_is_imported(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = run_bench(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert imported(result) == "[]"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("spelled", "parameters"), [
    ("grpo", {"mode": "seq-mean-token-mean", "rows": "all", "l_max": None}),
    ("seq-mean-token-mean", {"mode": "seq-mean-token-mean", "rows": "all", "l_max": None}),
    ("sequence-mean-token-mean", {"mode": "seq-mean-token-mean", "rows": "nonempty", "l_max": None}),  # tunix's
    ("dr_grpo", {"mode": "seq-mean-token-sum-norm", "rows": "all", "l_max": 1000.0}),
])
def test_the_built_ins_rows_run_the_mode_as_check_reads_its_spelling(spelled: str, parameters: dict) -> None:
    """`bench --reduction` without --target: a trainer's spelling brings its convention to the built-ins' rows, as
    `check --reduction` and `bench --target` read it."""
    from bench.contracts import parameters_for

    assert parameters_for("reduction", spelled) == parameters


def test_the_reduction_contract_is_benchmarked_against_the_floor_of_its_own_bytes(tmp_path: Path) -> None:
    result = run_bench(*TINY, "--contracts", "reduction", "--reduction", "grpo", "--no-save", "--json", "records.json",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / ".benchmarks").exists(), "--no-save made the autosave folder"
    records = json.loads((tmp_path / "records.json").read_text())
    assert {record["contract"] for record in records} == {"reduction"}  # --contracts: the magnitude rows are left out
    assert {record["parameters"] for record in records} == {"seq-mean-token-mean, rows=all"}  # grpo, resolved
    assert sorted(record["implementation"] for record in records) == ["floor", "numpy"]
    floor, numpy = sorted(records, key=lambda record: record["implementation"])
    # token_losses (8x512 float32) and the mask (1 byte a token) read, the 0-d loss written: the reduction's bytes,
    # not the magnitude diagnostic's (which also reads 8 advantages and writes 17 outputs)
    assert numpy["bytes"] == 8 * 512 * 4 + 8 * 512 + 4
    assert floor["bytes"] == numpy["bytes"] and numpy["floor_gbps"] == floor["gbps"]
    # the fraction is timed side by side: the row's calls alternated with the floor kernels' (bench/paired.py)
    assert numpy["paired_floor_s"] > 0 and numpy["paired_median_s"] > 0 and floor["paired_floor_s"] is None
    assert numpy["fraction_of_floor"] == pytest.approx(numpy["paired_floor_s"] / numpy["paired_median_s"])
    table = result.stdout[result.stdout.index("contract "):]
    rows = [line.split("  ")[0] for line in table.splitlines()[2:] if line.strip()]
    assert rows == ["reduction (seq-mean-token-mean, rows=all)"] * 2, table
    assert re.search(r"floor \((numpy|torch|jax)-sum\)", table) and "numpy" in table
    saved = json.loads((tmp_path / "out" / "bench" / "pytest-benchmark.json").read_text())
    names = sorted(bench["name"] for bench in saved["benchmarks"])
    assert "test_throughput[reduction-cpu-float32-small-numpy]" in names
    assert {bench["group"] for bench in saved["benchmarks"]} == {"reduction cpu float32 small 8x512"}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
@pytest.mark.parametrize("kind", ["outside the affinity", "not a number", "a reversed range"])
def test_cpus_this_process_may_not_use_are_refused_naming_the_ones_it_may(tmp_path: Path, kind: str) -> None:
    # Pinned to one CPU, so the message must come from the affinity, not from the host's core count.
    pinned = min(os.sched_getaffinity(0))
    other = next((cpu for cpu in sorted(os.sched_getaffinity(0)) if cpu != pinned), pinned + 1)
    value, message = {
        "outside the affinity": (f"{pinned},{other}", f"CPU {other} is not usable by this process"),
        "not a number": ("abc", "'abc' is not a CPU id (or a range like 0-3)"),
        "a reversed range": ("3-1", "'3-1' is not a CPU id (or a range like 0-3)"),
    }[kind]
    result = run_bench("--cpus", value, *TINY, cwd=tmp_path, preexec_fn=lambda: os.sched_setaffinity(0, {pinned}))
    assert result.returncode == 2, result.stderr
    assert f"argument --cpus: {message}; this process may use CPUs {pinned}\n" in result.stderr
    assert "Traceback" not in result.stderr
    assert imported(result) == "[]"
    assert list(tmp_path.iterdir()) == []


def test_a_device_that_is_not_here_is_refused_naming_those_that_are(tmp_path: Path) -> None:
    # An empty CUDA_VISIBLE_DEVICES hides every GPU from torch and JAX, so this holds on a GPU machine too.
    result = run_bench("--devices", "cpu,cuda", "--sizes", "small", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2, result.stderr
    assert "argument --devices: no cuda device here; devices: cpu\n" in result.stderr
    assert list(tmp_path.iterdir()) == []  # refused before pytest ran


def test_a_run_that_times_nothing_fails_with_the_reason(tmp_path: Path) -> None:
    # torch-triton is never timed on CPU (the interpreter's timings mean nothing): every row is skipped.
    result = run_bench("--implementations", "torch-triton", "--devices", "cpu", "--sizes", "small",
                       "--dtypes", "float32", "--quick", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    reason = re.search(r"^python -m bench: nothing was benchmarked: (.*)$", result.stderr, re.MULTILINE)
    assert reason, result.stderr
    assert "nothing to run on cpu" in reason.group(1)
    assert json.loads((tmp_path / "out" / "bench" / "skipped.json").read_text())["cpu"] in reason.group(1)


def test_bench_json_and_html_naming_one_file_are_refused_before_the_run(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bench", "--json", str(tmp_path / "r"), "--html",
                             str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--json and --html name the same file" in result.stderr, result.stderr


@pytest.mark.parametrize("option", ["--json", "--html"])
def test_an_unwritable_bench_report_is_refused_before_the_run(tmp_path, option):
    result = subprocess.run([sys.executable, "-m", "bench", option, str(tmp_path / "missing" / "r")], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    # refused before the run: pytest, which prints every row it runs, never started
    assert result.stdout == "" and result.returncode == 2, result.stdout + result.stderr
    assert f"argument {option}: cannot write the report there" in result.stderr


YOURS = """
import time

import numpy as np


def token_mean(token_losses, token_mask):
    total = np.where(token_mask, token_losses, 0).sum(dtype=np.float64)
    return np.asarray(total / max(int(token_mask.sum()), 1), dtype=np.float32)


def by_width(token_losses, token_mask):
    return np.asarray(np.where(token_mask, token_losses, 0).sum() / token_mask.size, dtype=np.float32)


def multiplied(token_losses, token_mask):  # right only where masked-out positions are finite
    return np.asarray((token_losses * token_mask).sum(dtype=np.float64) / max(int(token_mask.sum()), 1),
                      dtype=np.float32)


def returns_none(token_losses, token_mask):
    return None


def returns_shape_1(token_losses, token_mask):
    return token_mean(token_losses, token_mask).reshape(1)


def raises(token_losses, token_mask):
    raise ValueError("my loss is broken")


def hangs(token_losses, token_mask):
    open("called", "w").close()  # the moment to interrupt a run
    time.sleep(3600)


def tunix(token_losses, token_mask):  # tunix's sequence-mean-token-mean: D counts the rows with a token
    counts = token_mask.sum(-1)
    means = np.where(token_mask, token_losses, 0).sum(-1, dtype=np.float64) / np.maximum(counts, 1)
    return np.asarray(means.sum() / max(int((counts > 0).sum()), 1), dtype=np.float32)


def per_chunk(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):  # a micro-batch's
    return np.asarray(np.where(token_mask, token_losses, 0).sum() / max(num_tokens, 1) * dp_size, dtype=np.float32)
"""


def test_a_users_function_is_timed_beside_the_built_ins_of_its_contract(tmp_path: Path) -> None:
    """`--target` with its `--framework` and declared reduction: one more row of the same run, named by the file,
    next to the floor and the built-ins, its fraction timed side by side as theirs."""
    (tmp_path / "mine.py").write_text(YOURS)
    result = run_bench(*TINY, "--target", "mine.py:token_mean", "--framework", "numpy", "--reduction", "token-mean",
                       "--no-save", "--json", "records.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    records = {record["implementation"]: record for record in json.loads((tmp_path / "records.json").read_text())}
    assert sorted(records) == ["floor", "mine.py:token_mean (numpy)", "numpy"]
    mine = records["mine.py:token_mean (numpy)"]
    assert mine["contract"] == "reduction" and mine["parameters"] == "token-mean" and mine["paired_median_s"] > 0
    assert mine["fraction_of_floor"] == pytest.approx(mine["paired_floor_s"] / mine["paired_median_s"])
    assert "mine.py:token_mean (numpy)" in result.stdout


def test_a_wrong_user_function_is_not_timed(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(YOURS)
    result = run_bench(*TINY, "--target", "mine.py:by_width", "--framework", "numpy", "--reduction", "token-mean",
                       "--no-save", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "mine.py:by_width (numpy) fails its check in float32 on cpu: loss = " in result.stdout, result.stdout
    assert "not timed" in result.stdout
    assert "Traceback" not in result.stdout and "some rows failed and are not in the table" in result.stderr


def test_a_first_call_that_cannot_be_stopped_ends_the_run(tmp_path: Path) -> None:
    """A call stuck in C code (a sleep here) cannot be interrupted and keeps running in the process: no row is timed
    beside it. The rows timed before it stay in the table."""
    (tmp_path / "mine.py").write_text(YOURS)
    result = run_bench("--implementations", "numpy", "--sizes", "small", "--dtypes", "float32,float64", "--devices",
                       "cpu", "--quick", "--target", "mine.py:hangs", "--framework", "numpy", "--reduction",
                       "token-mean", "--timeout", "2", "--no-save", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("the run ends here: the first call of mine.py:hangs (numpy) could not be stopped and still runs in this "
            "process" in result.stdout), result.stdout
    table = result.stdout[result.stdout.index("% of floor"):]
    assert " float32 " in table and " float64 " not in table, table


@pytest.mark.parametrize(("function", "message"), [
    ("returns_none", "loss is a NoneType, not a numpy.ndarray"),
    ("returns_shape_1", "loss has shape (1,), expected ()"),
    ("raises", "raised ValueError: my loss is broken"),
    ("hangs", "a call did not return within 2 s"),
])
def test_a_user_function_that_fails_its_first_call_is_told_so_and_not_timed(tmp_path: Path, function: str,
                                                                            message: str) -> None:
    """Its first call is made as `check` makes it, with `--timeout`: what it returns, raises or overruns is said as
    `check` says it, never the benchmark's own traceback or hang."""
    (tmp_path / "mine.py").write_text(YOURS)
    result = run_bench(*TINY, "--target", f"mine.py:{function}", "--framework", "numpy", "--reduction", "token-mean",
                       "--timeout", "2", "--no-save", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"mine.py:{function} (numpy) fails its check in float32 on cpu: {message}" in result.stdout, result.stdout
    assert "not timed" in result.stdout and "Traceback" not in result.stdout + result.stderr


def test_ctrl_c_ends_a_run_with_status_130_and_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(YOURS)
    wrapper = (SIGINT_AS_A_TERMINAL_SETS_IT + "import runpy, sys\nsys.argv = ['bench', *sys.argv[1:]]\n"
               "runpy.run_module('bench', run_name='__main__')\n")
    run = subprocess.Popen([sys.executable, "-c", wrapper, *TINY, "--target", "mine.py:hangs", "--framework", "numpy",
                            "--reduction", "token-mean", "--no-save"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                           start_new_session=True)
    deadline = time.monotonic() + 240
    while not (tmp_path / "called").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole foreground process group
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stdout + stderr
    assert "python -m bench: interrupted" in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize(("function", "declared", "parameters"), [
    ("multiplied", ("--reduction", "token-mean", "--masked-values", "finite"), "token-mean"),
    ("tunix", ("--reduction", "sequence-mean-token-mean"), "seq-mean-token-mean, rows=nonempty"),
], ids=["finite padding", "a trainer's spelling"])
def test_a_user_function_is_declared_as_check_declares_it(tmp_path: Path, function: str, declared: tuple[str, ...],
                                                           parameters: str) -> None:
    """What `check` would accept is timed: padding declared finite gets finite padding, and a trainer's spelling keeps
    its convention; the built-ins and the floor run the same declaration, so the rows share one group."""
    (tmp_path / "mine.py").write_text(YOURS)
    result = run_bench(*TINY, "--target", f"mine.py:{function}", "--framework", "numpy", *declared, "--no-save",
                       "--json", "records.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads((tmp_path / "records.json").read_text())
    assert len(records) == 3 and {record["parameters"] for record in records} == {parameters}


@pytest.mark.parametrize(("args", "message"), [
    (("--target", "mine.py:token_mean", "--reduction", "token-mean"), "argument --target: it needs --framework"),
    (("--rows", "all"), "argument --rows: it says how --target runs: it needs --target"),
    (("--timeout", "5"), "argument --timeout: it says how --target runs: it needs --target"),
    (("--target", "mine.py:token_mean", "--framework", "numpy", "--reduction", "token-mean", "--timeout", "0"),
     "argument --timeout: must be a positive number of seconds, got 0"),
    (("--target", "mine.py:nope", "--framework", "numpy", "--reduction", "token-mean"),
     "mine.py has no attribute 'nope' (it defines by_width, hangs, multiplied, per_chunk, raises, "
     "returns_none, returns_shape_1, token_mean, tunix)"),
    (("--target", "mine.py:token_mean", "--framework", "numpy"), "cannot be called as the magnitude contract calls"),
    (("--target", "mine.py:token_mean", "--framework", "numpy", "--rows", "all"),
     "--rows is a parameter of the loss reduction: it needs --reduction too"),
    (("--target", "mine.py:token_mean", "--framework", "numpy", "--reduction", "token-mean", "--contracts",
      "magnitude"), "argument --contracts: --target is timed beside the built-ins of its own contract, reduction"),
    (("--target", "mine.py:per_chunk", "--framework", "numpy", "--reduction", "token-mean"),
     "it takes a step's counts (num_tokens, num_sequences, dp_size, accumulation_steps): a per-micro-batch loss, "
     "checked as one (--accumulation on the command line, accumulation=True in check); bench times a whole batch"),
], ids=["no framework", "rows without target", "timeout without target", "no time", "no such function",
         "another contract's call", "rows without reduction", "another contract", "a per-micro-batch loss"])
def test_a_user_function_that_cannot_run_is_refused_before_the_run(tmp_path: Path, args: tuple[str, ...],
                                                                   message: str) -> None:
    (tmp_path / "mine.py").write_text(YOURS)
    result = run_bench(*args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine.py"]


def test_the_timeout_help_gives_checks_default() -> None:
    from bench.__main__ import build_parser
    from fuzz.run.calls import DEFAULT_TIMEOUT

    assert f"(default {DEFAULT_TIMEOUT:g})" in " ".join(build_parser().format_help().split())
