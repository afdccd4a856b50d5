"""Run cells in worker processes, always: the function under test runs where its crash or hang cannot take
the run with it, even with one cell and one worker.

Compiling (torch.compile's C++ kernels, XLA) dominates a run, and one cell compiles on about one core: two
workers on two cores nearly halve the time. Workers are never forked from this process (torch and JAX have
started threads by then), but from multiprocessing's fork server: a fresh single-threaded process that imports
this module and the run's frameworks once (`Framework.modules`, and where the run compiles `compiler_modules`:
importing them starts no device), so a worker starts in milliseconds where a spawned one imports torch again
(2 to 4 s), and dynamo and inductor at its first compile. Each builds its subjects once, so
the graphs one cell compiled serve the next cell of that worker, and it lives for the whole run.

Each worker tells this process when a call of the function starts (with its case) and ends. A call that
overruns the time limit gets its worker killed; a worker that dies (a segfault, `os._exit`, the kernel's
OOM killer) fails the cell it was running. Either way the cell's report names the case that was running,
and a fresh worker takes the cells left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from fuzz.report.results import CellResult
from fuzz.report.snippet import SnippetSource
from fuzz.run.calls import DEFAULT_TIMEOUT, Call, Watcher
from fuzz.run.cell import fuzz_task, progress
from fuzz.run.interrupted import CRASH, TIMEOUT, died, interrupted_cell, timed_out
from fuzz.run.plan import CellTask
from fuzz.run.processes import died_at_start, start_fork_server, stop_fork_server, suite_process_name
from fuzz.run.subjects import build_subject, snippet_source
from impls.cores import usable_cores
from impls.frameworks import adapter_class, check_modes, load_framework
from impls.registry import builtin_imports


class WorkerError(RuntimeError):
    """The harness failed inside a worker (not the function under test): its traceback, for exit 3."""


def default_jobs() -> int:
    """Two workers where two cores are ours, else one."""
    return min(2, usable_cores())


def run_cell(task: CellTask, watcher: Watcher) -> CellResult:
    """Fuzz one cell of a subject named by its spec (built once per process), printing a progress line; a
    sharded cell runs on its engine's ranks."""
    if task.engine is not None:
        from fuzz.engines.cell import run_sharded_cell

        cell = run_sharded_cell(task, watcher)
        progress(task, cell)
        return cell
    return fuzz_task(build_subject(task.subject), task, watcher)


class PipeWatcher(Watcher):
    """In a worker: tell the parent when a call starts (and on what) and when it ends."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def run(self, call: Call, thunk: Callable[[], Any]) -> Any:
        self.connection.send(("call", call))  # a case is at most a few hundred KB: cheap next to the call
        try:
            return thunk()
        finally:
            self.connection.send(("return", None))


def _worker_main(connection: Connection, storage: str, frameworks: tuple[str, ...]) -> None:
    # A Ctrl-C reaches the whole process group: the parent stops its workers (run_cells' `finally`). Ignored here,
    # it cannot land in a call, so a KeyboardInterrupt in one is the function's own (call_safely).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Hypothesis writes caches (the constants it mines from source files) under its storage directory,
    # `.hypothesis/` in the current directory by default: keep them in the run's temporary directory.
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = storage
    connection.send(("ready", None))  # started: what fails after this is a cell's business
    for name in frameworks:  # its adapters (their modules are imported already); a failing one is a cell's to report
        with contextlib.suppress(Exception):
            load_framework(name)
    watcher = PipeWatcher(connection)
    while True:
        task = connection.recv()
        if task is None:
            return
        try:
            if task.engine is None:  # a sharded cell's calls run on ranks: it reports their failures itself
                connection.send(("subject", snippet_source(build_subject(task.subject))))
            connection.send(("result", run_cell(task, watcher)))
        except BaseException:  # the harness's own failure (the function's are verdicts): the parent exits 3
            connection.send(("error", traceback.format_exc()))
            return


class _Worker:
    """The parent's view of one worker process and the cell it runs."""

    def __init__(self, context: Any, storage: str, frameworks: tuple[str, ...] = ()) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, storage, frameworks),
                                       name=suite_process_name("fuzz worker"))
        self.process.start()
        child.close()
        self.index: int | None = None
        self.task: CellTask | None = None
        self.source: SnippetSource | None = None
        self.call: Call | None = None
        self.call_started: float | None = None
        self.cell_started = 0.0
        self.ready = False  # it started and said so; one that dies before that never ran a cell
        self.used = False  # it was given a cell

    def assign(self, index: int, task: CellTask) -> None:
        self.index, self.task, self.source, self.call, self.call_started = index, task, None, None, None
        self.used = True
        self.cell_started = time.monotonic()
        with contextlib.suppress(OSError):  # it died before its first cell: the wait reports how (died_at_start)
            self.connection.send(task)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()  # not terminate: a hung C extension may never act on SIGTERM
        self.process.join()
        self.connection.close()


def _failed(worker: _Worker, failure: str, kind: str, call: Call | None) -> CellResult:
    """The worker's cell, failed; with a snippet of `call` where the worker had described its subject. Its
    progress line is written here: the worker that would have written it is gone."""
    task = worker.task
    assert task is not None
    source = worker.source or SnippetSource(task.subject.name, "", (), "", None, ())
    call = call if worker.source is not None else None
    cell = interrupted_cell(source, task, call, failure, kind, seconds=time.monotonic() - worker.cell_started,
                            contract=task.subject.bound_contract.label)
    progress(task, cell)
    return cell


def worker_context(frameworks: Sequence[str], modules: Sequence[str] = ()) -> tuple[Any, bool]:
    """Workers fork from a server that imported this module, the frameworks' modules and `modules`
    (fuzz/run/processes.py); and whether it was started here."""
    return start_fork_server([__name__, *(module for name in frameworks for module in adapter_class(name).modules),
                              *modules])


class Workers:
    """The worker processes of one run, which may be made before its cells are known: the server they fork from
    starts at once and imports `frameworks` (adapter names) and `modules` (a compiler, the built-ins' own modules:
    importing them must start no thread) while this process loads the target or plans, which imports the same
    (seconds with torch). Each worker is forked when `run_cells` first needs it, and makes its frameworks'
    adapters before its first cell. `run_cells` stops them when it ends; `close` stops them where it never ran
    (the target did not load)."""

    def __init__(self, frameworks: tuple[str, ...] = (), modules: tuple[str, ...] = ()) -> None:
        self.context, self._started_server = worker_context(frameworks, modules)
        self._storage = tempfile.TemporaryDirectory(prefix="lossnorm-fuzz-")
        self.frameworks = frameworks
        self.started: list[_Worker] = []
        self._forked = False  # a worker was forked: the server has done its imports, and serves the whole run

    def new(self) -> _Worker:
        self._forked = True
        return _Worker(self.context, self._storage.name, self.frameworks)

    def close(self) -> None:
        finishing = [worker for worker in self.started if worker.used and worker.task is None]
        for worker in finishing:
            if worker.process.is_alive():
                with contextlib.suppress(OSError):  # a clean exit lets the worker flush its output
                    worker.connection.send(None)
        for worker in finishing:
            worker.process.join(timeout=5)
        for worker in self.started:  # the others: busy with an abandoned cell, or never given one (still importing)
            worker.stop()
        self.started = []
        self._storage.cleanup()
        if self._started_server and not self._forked:  # the run ended before it began: nothing outlives it
            stop_fork_server()
            self._started_server = False


def mode_imports(mode: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The framework (adapter name) a user's function runs on under a `check --framework` mode (or an engine's
    framework), and the modules it imports besides (a compiled mode's compiler): what its workers' server imports."""
    name, check_mode = check_modes()[mode]
    return (name,), adapter_class(name).compiler_modules if check_mode.wrap else ()


def task_imports(tasks: Sequence[CellTask]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The frameworks (adapter names) the tasks' subjects run on, and the modules they import besides (a built-in's
    own, a compiled mode's compiler): what their workers' server imports."""
    frameworks: list[str] = []
    modules: list[str] = []
    for spec in dict.fromkeys(task.subject for task in tasks):
        if spec.framework is None:  # a built-in: the registry says
            imports = builtin_imports([spec.name], [spec.contract])
        elif spec.framework in check_modes():  # a user's function under a `check --framework` mode
            imports = mode_imports(spec.framework)
        else:
            continue
        frameworks += imports[0]
        modules += imports[1]
    return tuple(dict.fromkeys(frameworks)), tuple(dict.fromkeys(modules))


def run_cells(tasks: Sequence[CellTask], *, jobs: int, fail_fast: bool = False, timeout: float = DEFAULT_TIMEOUT,
              priority: Callable[[CellTask], int] = lambda task: 0, started: Workers | None = None) -> list[CellResult]:
    """Every task's result, in the tasks' order, each cell run in a worker process (at most `jobs` of them; those
    of `started` first, and then stopped with the others). Higher `priority` starts first (the slow cells first,
    so no worker is left with a long one at the end). A call of the function that runs longer than `timeout`
    seconds fails its cell. With `fail_fast`, stop at the first failing cell to finish: the results so far are
    returned and the cells still running are abandoned. Raises WorkerError if the harness itself failed in a
    worker."""
    pending = deque(sorted(range(len(tasks)), key=lambda i: -priority(tasks[i])))
    done: dict[int, CellResult] = {}
    pool = started or Workers(*task_imports(tasks))
    workers = pool.started  # the live workers: one that died is replaced by a fresh one
    setups = [task.worker_setup for task in tasks]
    holders: dict[str, _Worker] = {}  # each worker_setup's worker: the one that started it
    try:
        while pending or any(worker.task for worker in workers):
            for worker in workers:
                if worker.task is None and pending:
                    index = _take(pending, setups, worker, holders)
                    worker.assign(index, tasks[index])
            while pending and len(workers) < min(jobs, len(tasks)):
                workers.append(pool.new())
                index = _take(pending, setups, workers[-1], holders)
                workers[-1].assign(index, tasks[index])
            finished = _wait_for_news(workers, timeout)
            for worker, result in finished:
                assert worker.index is not None
                done[worker.index] = result
                worker.index = worker.task = None
                if not worker.process.is_alive():
                    worker.stop()
                    workers.remove(worker)
                    for setup in [setup for setup, holder in holders.items() if holder is worker]:
                        del holders[setup]
            if fail_fast and any(not result.ok for _, result in finished):
                break
    finally:
        pool.close()
    return [done[i] for i in sorted(done)]


def _take(pending: deque[int], setups: Sequence[str], worker: _Worker, holders: dict[str, _Worker]) -> int:
    """The next task for `worker`, removed from `pending`: the first (in priority order) that needs no worker setup
    (`setups[index]` ""), or the one this worker holds, or one no worker has started yet (this worker then holds
    it). A cell whose setup another worker holds waits for that worker (a pool of ranks, a JAX process: seconds to
    start again), unless nothing else is left, where waiting would leave this worker idle."""
    position = next((position for position, index in enumerate(pending)
                     if holders.get(setups[index], worker) is worker), 0)
    index = pending[position]
    del pending[position]
    setup = setups[index]
    if setup:
        holders.setdefault(setup, worker)
    return index


def _wait_for_news(workers: list[_Worker], timeout: float) -> list[tuple[_Worker, CellResult]]:
    """Wait until a busy worker says something, dies, or overruns a call; return the cells that ended."""
    busy = [worker for worker in workers if worker.task is not None]
    deadlines = [worker.call_started + timeout for worker in busy if worker.call_started is not None]
    wait_for = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
    wait([handle for worker in busy for handle in (worker.connection, worker.process.sentinel)], wait_for)
    finished = []
    for worker in busy:
        alive = worker.process.is_alive()  # before reading: what a dead worker sent is all in the pipe by then
        result = _read(worker)
        if result is None and worker.call_started is not None and time.monotonic() >= worker.call_started + timeout:
            call = worker.call
            assert call is not None
            worker.process.kill()
            worker.process.join()
            result = _failed(worker, timed_out(timeout, call), TIMEOUT, call)
        if result is None and not alive and not worker.ready:
            worker.process.join()
            raise WorkerError(died_at_start("a worker process", worker.process.exitcode))
        if result is None and not alive:
            worker.process.join()
            call = worker.call if worker.call_started is not None else None
            result = _failed(worker, died(worker.process.exitcode, call), CRASH, call)
        if result is not None:
            finished.append((worker, result))
    return finished


def _read(worker: _Worker) -> CellResult | None:
    """Handle what the worker has sent so far; its cell's result once it has sent one."""
    while True:
        try:
            if not worker.connection.poll():
                return None
            kind, payload = worker.connection.recv()
        except (EOFError, OSError):  # the worker died; the caller sees it in its exit code
            return None
        if kind == "ready":
            worker.ready = True
        elif kind == "subject":
            worker.source = payload
        elif kind == "call":
            worker.call = payload
            worker.call_started = time.monotonic()
        elif kind == "return":
            worker.call_started = None
        elif kind == "result":
            return payload
        elif kind == "error":
            raise WorkerError(f"a worker process failed:\n{payload}")
