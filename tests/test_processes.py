"""The fork server that workers fork from: what a run's workers import before their first cell, and that those
imports start no thread (a fork copies only the forking thread: one that held a lock would leave it held)."""

import subprocess
import sys
from pathlib import Path

import pytest

from impls.frameworks import FRAMEWORK_NAMES, adapter_class
from impls.registry import builtin_imports

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    """What a fresh Python process running `code` (in the checkout) prints."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         timeout=120)
    return out.stdout


def test_a_campaign_preloads_its_builtins_frameworks_and_modules_and_a_compiled_ones_compiler():
    frameworks, modules = builtin_imports(["torch-eager", "torch-compile", "numpy"], ["magnitude", "reduction"])
    assert frameworks == ("torch", "numpy")
    compiler = adapter_class("torch").compiler_modules
    assert compiler and set(compiler) <= set(modules)
    assert {"impls.torch_eager", "impls.torch_compile", "impls.numpy_impl", "impls.torch_eager_reduction",
            "impls.torch_compile_reduction", "impls.numpy_reduction"} <= set(modules)
    eager = builtin_imports(["torch-eager", "numpy"], ["magnitude"])[1]
    assert not set(compiler) & set(eager)  # eager code imports no compiler


def test_listing_what_a_campaign_imports_imports_nothing():
    code = ("import sys; from impls.registry import builtin_imports; builtin_imports(['torch-compile', 'jax-jit'], "
            "['magnitude']); print(sorted(m for m in ('torch', 'jax') if m in sys.modules))")
    assert _run(code).strip() == "[]"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads from /proc (Linux)")
def test_a_compilers_modules_start_no_thread():
    """What the fork server imports for compiled code (dynamo, inductor, inductor's probes of the CPU) starts no
    thread beyond those of the frameworks' own modules."""
    code = "\n".join([
        "import importlib, os",
        "from impls.frameworks import prepare_process, adapter_class",
        "prepare_process()",
        "threads = lambda: len(os.listdir('/proc/self/task'))",
        f"for name in {list(FRAMEWORK_NAMES)!r}:",
        "    for module in adapter_class(name).modules:",
        "        importlib.import_module(module)",
        "before = threads()",
        f"for name in {list(FRAMEWORK_NAMES)!r}:",
        "    for module in adapter_class(name).compiler_modules:",
        "        importlib.import_module(module)",
        "print(before, threads())",
    ])
    before, after = _run(code).split()
    assert after == before


def test_a_run_that_ends_before_forking_a_worker_leaves_no_process_behind():
    """`check` of a target that does not load exits 2 at once: the fork server it started (still importing torch)
    is stopped, not left running with the caller's output pipes open."""
    code = "\n".join([
        "import os",
        "from fuzz.run import processes",
        "from fuzz.run.workers import Workers",
        "workers = Workers(('torch',), ('torch._dynamo',))",
        "server = processes._server_pid()",
        "workers.close()",
        "try:",
        "    os.kill(server, 0)",
        "    alive = True",
        "except ProcessLookupError:",
        "    alive = False",
        "print(server is not None, alive, processes._server_pid())",
    ])
    assert _run(code).split() == ["True", "False", "None"]


def test_a_run_that_forked_workers_keeps_its_server_for_the_next():
    code = "\n".join([
        "from fuzz.run import processes",
        "from fuzz.run.workers import Workers",
        "workers = Workers()",
        "server = processes._server_pid()",
        "workers.new().stop()",
        "workers.close()",
        "print(processes._server_pid() == server is not None)",
    ])
    assert _run(code).strip() == "True"


def test_the_server_of_a_runs_workers_imports_what_its_tasks_run_on():
    """`run_cells` without workers of its own (the API's `workers=N`, a sharded check's cells) preloads the tasks'
    frameworks: a built-in's from the registry, a user's function's from its mode, with a compiled mode's compiler."""
    from fuzz.run.plan import CellTask
    from fuzz.run.subjects import SubjectSpec
    from fuzz.run.workers import task_imports

    def task(spec):
        return CellTask(spec, "cpu", "float32", "forward", 1, 0)

    assert task_imports([task(SubjectSpec("numpy"))]) == (("numpy",), ("impls.numpy_impl",))
    assert task_imports([task(SubjectSpec("f.py:f", "torch"))]) == (("torch",), ())
    compiled_and_jax = [task(SubjectSpec("f.py:f", "torch-compile")), task(SubjectSpec("g.py:g", "jax"))]
    frameworks, modules = task_imports(compiled_and_jax)
    assert frameworks == ("torch", "jax") and modules == adapter_class("torch").compiler_modules
