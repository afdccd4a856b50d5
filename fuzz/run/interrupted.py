"""A cell whose last call never came back (it overran its time limit, or its worker process died): failed
with the case that was running, unshrunk, and a snippet of it. Nothing here imports a framework, so the
parent process of the workers can build these reports."""

from __future__ import annotations

import signal

from fuzz.report.results import Bug, CellResult
from fuzz.report.snippet import SnippetSource, snippet_for
from fuzz.run.calls import Call, CallTimedOut

TIMEOUT = "call timed out"
CRASH = "worker process died"


def interrupted_cell(source: SnippetSource, task: object, call: Call | None, failure: str, kind: str, *,
                     examples: int = 0, seconds: float = 0.0, contract: str = "") -> CellResult:
    """The cell of `task` (a CellTask) failed with `failure` (of `kind`: TIMEOUT or CRASH); with the call that
    was running, a bug with its case and a snippet, else a problem of the cell."""
    result = CellResult(source.name, task.device, task.dtype, task.row, examples=examples,  # type: ignore[attr-defined]
                        seconds=seconds, layouts=source.layouts, precision=source.precision,
                        contract=contract or (call.case.contract.label if call is not None else ""))
    if call is None:
        result.problems.append(failure)
        return result
    snippet = snippet_for(source, call.case, [failure], call.cotangents)
    result.bugs.append(Bug(kind, [failure], call.case, snippet))
    return result


# How a call that overran its time limit ended: its worker process killed; interrupted in its thread (the
# in-process API); or still running there (blocked in C code, where Python cannot stop a thread).
KILLED, INTERRUPTED, ABANDONED = "killed", "interrupted", "abandoned"
_ENDINGS = {
    KILLED: "was stopped (its worker process killed)",
    INTERRUPTED: "was interrupted in its thread",
    ABANDONED: ("could not be stopped: it is still running in a thread of this process (a call blocked in C "
                "code cannot be interrupted; check(..., workers=N) runs calls in processes that are killed instead)"),
}


def timed_out(seconds: float, call: Call, ending: str = KILLED) -> str:
    return (f"a {call.what} call did not return within {seconds:g} s (the time limit per call: --timeout, or "
            f"check's timeout=) and {_ENDINGS[ending]}; the case below is the one it was running (not shrunk)")


def timed_out_in_process(stopped: CallTimedOut) -> str:
    """timed_out for a call the in-process watcher (fuzz/run/calls.py) gave up on."""
    return timed_out(stopped.seconds, stopped.call, INTERRUPTED if stopped.stopped else ABANDONED)


def died(exitcode: int | None, call: Call | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with status {exitcode}"
    if call is None:
        return f"the worker process running this cell {how} before or between calls of the function"
    return (f"the worker process {how} during a {call.what} call of the function (a crash or an exit in the "
            "function under test); the case below is the one it was running (not shrunk)")
