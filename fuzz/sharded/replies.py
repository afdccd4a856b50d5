"""What a rank (a torch rank process, or the JAX mesh worker) sends back for one example: its own failures
(an exception, wrong structure, modified inputs), and the outputs or gradients read back as float64."""

from __future__ import annotations

from typing import Any

from fuzz.checks import Failure, Verdict, check_output_structure
from fuzz.gradients import GRADIENT_STRUCTURE
from impls.case import Case
from reference import OUTPUT_KEYS


def rank_reply(adapter: Any, case: Case, verdict: Verdict, result: Any, cotangents: Any,
               changes: tuple[Failure, ...] = ()) -> dict[str, Any]:
    """The reply to the parent for a call that gave `verdict` and `result` (the outputs, or with
    `cotangents` the VJP's (outputs, d token_log_probs, d advantages)); `changes`: inputs it modified."""
    reply: dict[str, Any] = {"failures": list(verdict.failures), "traceback": verdict.traceback}
    if not verdict.ok:
        if cotangents is not None:
            reply["failures"] = [Failure(f"backward {f.kind}", f"backward {f.message}") for f in verdict.failures]
        return reply
    reply["failures"] += list(changes)
    if cotangents is None:
        reply["failures"] += check_output_structure(result, adapter, case).failures
        if isinstance(result, dict) and all(adapter.is_array(result.get(key)) for key in OUTPUT_KEYS):
            reply["outputs"] = {key: adapter.to_float64(result[key]) for key in OUTPUT_KEYS}
        return reply
    _, grad_log_probs, grad_advantages = result
    reply["gradients"] = {}
    for name, got in (("d token_log_probs", grad_log_probs), ("d advantages", grad_advantages)):
        if not adapter.is_array(got):
            reply["failures"].append(Failure(GRADIENT_STRUCTURE,
                                             f"{name} is a {type(got).__name__}, not a {adapter.array_type}"))
            continue
        if adapter.dtype_of(got) != case.dtype:
            reply["failures"].append(Failure(GRADIENT_STRUCTURE,
                                             f"{name} has dtype {adapter.dtype_of(got)}, expected {case.dtype}"))
        reply["gradients"][name] = adapter.to_float64(got)
    return reply
