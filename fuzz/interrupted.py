"""A cell whose last call never came back (it overran its time limit, or its worker process died): failed
with the case that was running, unshrunk, and a snippet of it. Nothing here imports a framework, so the
parent process of the workers can build these reports."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from fuzz.calls import Call
from fuzz.campaign import Bug, CellResult
from fuzz.exact import exact
from fuzz.snippet import render_snippet
from reference import vjp
from reference.tolerance import CONTRACT, PRECISIONS, gradient_tolerance, tolerance

TIMEOUT = "call timed out"
CRASH = "worker process died"


@dataclass(frozen=True)
class SnippetSource:
    """What a snippet needs to know of a subject, small enough to send from a worker to its parent."""

    name: str
    framework: str
    import_lines: tuple[str, ...]
    function_name: str
    wrap: str | None
    layouts: tuple[str, ...]
    precision: str = CONTRACT.name


def interrupted_cell(source: SnippetSource, device: str, dtype: str, check: str, call: Call | None,
                     failure: str, kind: str, *, examples: int = 0, seconds: float = 0.0) -> CellResult:
    """The cell failed with `failure` (of `kind`: TIMEOUT or CRASH); with the call that was running, a bug
    with its case and a snippet, else a problem of the cell."""
    result = CellResult(source.name, device, dtype, check, examples=examples, seconds=seconds,
                        layouts=source.layouts, precision=source.precision)
    if call is None:
        result.problems.append(failure)
        return result
    case = call.case
    precision = PRECISIONS[source.precision]
    expected = exact(case)
    gradient_parts = {}
    if call.cotangents is not None:
        gradients = vjp(case.token_log_probs, case.advantages, case.token_mask, call.cotangents, expected)
        gradient_parts = {"cotangents": call.cotangents, "gradients": gradients,
                          "gradient_tol": gradient_tolerance(gradients, call.cotangents, case.dtype, precision)}
    snippet = render_snippet(
        case=case, framework=source.framework, import_lines=source.import_lines,
        function_name=source.function_name, wrap=source.wrap, expected=expected,
        tol=tolerance(expected, case.dtype, precision), failures=[failure], **gradient_parts,
    )
    result.bugs.append(Bug(kind, [failure], case, snippet))
    return result


def timed_out(seconds: float, call: Call) -> str:
    return (f"a {call.what} call did not return within {seconds:g} s (the --timeout per call) and was stopped; "
            "the case below is the one it was running (not shrunk)")


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
