"""Run cells one after another in this process, or over worker processes.

Compiling (torch.compile's C++ kernels, XLA) dominates a run, and one cell compiles on about one core: two
workers on two cores nearly halve the time. Workers are spawned, never forked (torch and JAX have
started threads by then), and each builds its subjects once, so the graphs one cell compiled serve the
next cell of that worker."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence

from fuzz.campaign import CellResult
from fuzz.cells import CellTask, run_cell


def default_jobs() -> int:
    return min(2, os.cpu_count() or 1)


def _indexed_run(item: tuple[int, CellTask]) -> tuple[int, CellResult]:
    index, task = item
    return index, run_cell(task)


def run_cells(tasks: Sequence[CellTask], *, jobs: int, fail_fast: bool = False,
              priority: Callable[[CellTask], int] = lambda task: 0) -> list[CellResult]:
    """Every task's result, in the tasks' order. Higher `priority` starts first (put the slow cells first so
    that no worker is left with a long one at the end). With `fail_fast`, stop at the first failing cell:
    the results so far are returned and the cells still running are abandoned."""
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
    with context.Pool(min(jobs, len(tasks))) as pool:  # leaving the block terminates the workers
        for index, result in pool.imap_unordered(_indexed_run, [(i, tasks[i]) for i in order], chunksize=1):
            done[index] = result
            if fail_fast and not result.ok:
                break
    return [done[i] for i in sorted(done)]
