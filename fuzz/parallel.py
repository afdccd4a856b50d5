"""Run cells one after another in this process, or over worker processes.

Compiling (torch.compile's C++ kernels, XLA) dominates a run, and one cell compiles on about one core: two
workers on two cores nearly halve the time. Workers are spawned, never forked (torch and JAX have
started threads by then), and each builds its subjects once, so the graphs one cell compiled serve the
next cell of that worker. A worker that dies (a crash in the function under test, `os._exit`, the
kernel's OOM killer) fails the cells it left unfinished instead of hanging the run.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool

from fuzz.campaign import CellResult
from fuzz.cells import CellTask, run_cell
from impls.cores import usable_cores

WORKER_DIED = ("a worker process died before this cell finished (a crash, an exit or a kill in the function "
               "under test?); run with --jobs 1 to see which cell does it")


def default_jobs() -> int:
    """Two workers where two cores are ours, else one."""
    return min(2, usable_cores())


def _died(task: CellTask) -> CellResult:
    return CellResult(task.subject.name, task.device, task.dtype, task.check, problems=[WORKER_DIED])


def run_cells(tasks: Sequence[CellTask], *, jobs: int, fail_fast: bool = False,
              priority: Callable[[CellTask], int] = lambda task: 0) -> list[CellResult]:
    """Every task's result, in the tasks' order. Higher `priority` starts first (put the slow cells first so
    that no worker is left with a long one at the end). With `fail_fast`, stop at the first failing cell
    to finish: the results so far are returned and the cells still running are abandoned."""
    if jobs <= 1 or len(tasks) <= 1:
        results = []
        for task in tasks:
            results.append(run_cell(task))
            if fail_fast and not results[-1].ok:
                break
        return results
    order = sorted(range(len(tasks)), key=lambda i: -priority(tasks[i]))
    done: dict[int, CellResult] = {}
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=context)
    try:
        futures = {pool.submit(run_cell, tasks[i]): i for i in order}
        for future in concurrent.futures.as_completed(futures):
            index = futures[future]
            try:
                done[index] = future.result()
            except BrokenProcessPool:
                done[index] = _died(tasks[index])
            if fail_fast and not done[index].ok:
                break
    finally:
        _stop(pool)
    return [done[i] for i in sorted(done)]


def _stop(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now: an abandoned compiled cell can take a minute."""
    processes = list(getattr(pool, "_processes", {}).values())  # the executor has no public terminate
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join()
