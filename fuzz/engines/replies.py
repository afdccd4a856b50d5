"""What a rank (a torch rank process, or the JAX mesh worker) sends back for one example: its own failures
(an exception, wrong structure, modified inputs) and the outputs or gradients read back as float64, judged
by the one structure check (fuzz/judge/outputs.py) against the rank's own case."""

from __future__ import annotations

from typing import Any

from fuzz.judge.outputs import check_gradient_arrays, check_outputs
from fuzz.judge.verdict import Verdict
from impls.frameworks import Framework
from reference.case import Case


def rank_reply(adapter: Framework, case: Case, verdict: Verdict, result: Any, backward: bool,
               changes: Verdict | None = None) -> dict[str, Any]:
    """The reply to the parent for a call that gave `verdict` and `result` (the outputs, or with `backward` the
    adapter's VJP, a failing one's failures already named by the pass that raised them); `changes`: what it did to
    its inputs."""
    reply: dict[str, Any] = {"failures": list(verdict.failures), "traceback": verdict.traceback}
    if not verdict.ok:
        return reply
    reply["failures"] += list(changes.failures if changes is not None else ())
    read, structure = (check_gradient_arrays if backward else check_outputs)(result, adapter, case)
    reply["failures"] += structure.failures
    if read is not None:
        reply["gradients" if backward else "outputs"] = read.values
        reply["dtypes"] = read.dtypes
    return reply
