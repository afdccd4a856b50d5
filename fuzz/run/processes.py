"""Where the suite's child processes (workers, torch ranks) come from: multiprocessing's fork server, a fresh
single-threaded process that imports the heavy modules once and then forks each child in milliseconds. Never a
fork of the calling process itself: it may hold threads (torch's, JAX's, a user's). Where a platform has no
fork server (Windows), children are spawned: they import those modules themselves."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from fuzz.judge.verdict import StopsTheCell


def start_fork_server(preload: Sequence[str]) -> tuple[Any, bool]:
    """A multiprocessing context whose children fork from the fork server, told to import `preload` (module
    names; one that fails to import is skipped) when it starts; and whether this call started that server. The
    server starts now, so its imports run while this process goes on (the first child's start waits for them). A
    server this process already runs keeps its own preloads, and the children import the rest themselves. The
    server starts with this process's environment at that moment, so process-wide settings made before
    (`prepare_process`) hold in it."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn"), False
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(dict.fromkeys(preload)))
    running = _server_pid() is not None
    multiprocessing.forkserver.ensure_running()
    return context, not running


class DidNotStart(StopsTheCell):
    """The suite's own processes for an example (a pool of torch ranks, the JAX mesh worker) did not start: the
    harness's failure, never the function's. A BaseException, like a call's time limit, so that Hypothesis ends
    the cell at once rather than shrink it, which would start them again for every example it tries, each start
    with its own time limit; the cell's runner raises it on as a RuntimeError (fuzz/engines/cell.py)."""


MAIN_GUARD = "put the call under `if __name__ == \"__main__\":`"


SUITE_PROCESS = "lossnorm-"  # how the suite names the processes it starts (workers, ranks, the JAX mesh process)


def suite_process_name(what: str) -> str:
    return SUITE_PROCESS + what


def refuse_while_starting() -> None:
    """Raise RuntimeError in a process of the suite's that multiprocessing is still starting: a fork server's child
    or a spawned one imports the script that started it before it runs its target, so a script that calls `check()`
    at module level would run that whole check again in every worker and rank the first one starts (and only fail,
    minutes later, where that second check starts processes of its own). Refused at once, the child dies at start
    and its parent says why (`died_at_start`). `_inheriting` is multiprocessing's own flag for that phase, the one
    its "bootstrapping phase" error reads; the process's name, which multiprocessing sets before it imports the
    script, tells the suite's processes from the user's own (a user's pool worker importing such a script runs
    its check again, slowly, as it always did, rather than die and be restarted forever)."""
    process = multiprocessing.current_process()
    if getattr(process, "_inheriting", False) and process.name.startswith(SUITE_PROCESS):
        raise RuntimeError("check() was called while this process was starting: multiprocessing imports the script "
                           "that started the suite's workers or ranks in each of them, and that script calls check() "
                           f"at module level: {MAIN_GUARD}")


def died_at_start(process: str, exitcode: int | None) -> str:
    """Why a child that never said it was ready died: most often, the script that started it calls `check()` at
    module level, and multiprocessing (the fork server, or spawn), which imports that script in each new process,
    calls it again there, which `refuse_while_starting` refuses."""
    return (f"{process} exited with status {exitcode} before it started (its own error is printed above, on "
            "stderr). If the script that calls fuzz.check(...) does so at module level, each process the suite "
            f"starts imports that script as it starts and calls check() again, which is refused: {MAIN_GUARD}")


def slow_to_start(process: str, timeout: float, imports: str) -> str:
    """Why a child said nothing within its start limit: besides its framework (`imports`), it imports the function's
    module and the calling script, whose module-level work multiprocessing runs again in every new process."""
    return (f"{process} did not start within {timeout:g} s: each process the suite starts imports {imports}, the "
            "function's module and the script that called check() (multiprocessing imports it in every new process), "
            "so whatever that script does at module level runs again there: if it does more than define functions, "
            f"{MAIN_GUARD}")


def fork_server_context(preload: Sequence[str]) -> Any:
    """`start_fork_server(preload)`'s context."""
    return start_fork_server(preload)[0]


def _server_pid() -> int | None:
    # multiprocessing's own record of the server it started (private: Python has no public way to ask)
    return getattr(getattr(multiprocessing.forkserver, "_forkserver", None), "_forkserver_pid", None)


def stop_fork_server() -> None:
    """Stop the fork server at once, even while it still imports its preloads: for a command that started it and
    ends before forking anything (the target did not load), so that no process outlives the command, holding the
    output pipes a caller waits on. The next child starts a fresh server. Where multiprocessing keeps its state
    otherwise (another Python), nothing is done, and the server exits by itself when its imports are done."""
    server, pid = getattr(multiprocessing.forkserver, "_forkserver", None), _server_pid()
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with contextlib.suppress(OSError, TypeError):
        os.close(server._forkserver_alive_fd)
    address = getattr(server, "_forkserver_address", None)
    with contextlib.suppress(OSError, TypeError):
        if address and not multiprocessing.util.is_abstract_socket_namespace(address):
            os.unlink(address)
    server._forkserver_alive_fd = server._forkserver_address = server._forkserver_pid = None


def exit_without_teardown(code: int) -> NoReturn:
    """End a command's process with status `code`, as a normal exit would in all that a caller sees (the atexit
    handlers run, the output is flushed) but without the interpreter's teardown, which destroys every module's
    objects one by one: 0.7 s with torch loaded on a 2-core machine, after the verdict is out. The fork server, idle
    now (every child has ended), is stopped at once for the same reason: left to exit by itself when this process
    ends, it would spend as long in its own teardown, holding the output pipes a caller waits on."""
    atexit._run_exitfuncs()  # what a normal exit runs first: multiprocessing's clean-up, temporary folders, logging
    stop_fork_server()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that closed the pipe: the rest goes nowhere
            stream.flush()
    os._exit(code)
