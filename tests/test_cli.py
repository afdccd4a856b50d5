"""`python -m fuzz check`: exit 0 conforms, 1 counterexample (a snippet that reproduces), 2 usage/load error."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
        ("impls.dtypes:DTYPE_NAMES", "impls.dtypes:DTYPE_NAMES is a tuple, not a function"),
        ("impls.dtypes:nothing_here", "impls.dtypes has no attribute 'nothing_here'"),
        ("justaname", "TARGET must look like package.module:function"),
    ],
)
def test_load_errors_exit_2_with_a_clear_message(target, message):
    result = run_fuzz("check", target, "--framework", "numpy")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


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


def test_a_correct_function_conforms(tmp_path):
    result = run_fuzz("check", "impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy",
                      "--json", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] and len(report["cells"]) == 4
    assert all(cell["examples"] == 40 for cell in report["cells"])


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
    assert len(cells) == 1 and not cells[0]["ok"] and cells[0]["snippet"]  # every cell fails: the first ends it


def test_a_function_that_kills_its_worker_fails_instead_of_hanging(tmp_path):
    path = write(tmp_path, "dies.py", "import os\ndef f(lp, adv, mask):\n    os._exit(3)\n")
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--jobs", "2", "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    cells = json.loads((tmp_path / "r.json").read_text())["cells"]
    assert len(cells) == 4 and all("worker process died" in cell["failures"][0] for cell in cells)


def test_a_function_that_raises_system_exit_is_a_failure_not_an_exit(tmp_path):
    path = write(tmp_path, "exits.py", "def f(lp, adv, mask):\n    raise SystemExit(0)\n")
    result = run_fuzz("check", f"{path}:f", "--framework", "numpy", "--jobs", "1", "--dtypes", "float32")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "raised SystemExit" in result.stdout


def test_every_command_has_help():
    assert "conformance matrix" in run_fuzz("--help").stdout
    assert "--framework" in run_fuzz("check", "--help").stdout
