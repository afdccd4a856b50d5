"""Differential fuzzing of RL-for-LLM loss normalization against an exact float64 reference: the magnitude
diagnostic, the loss reductions, and their per-chunk form over micro-batches and ranks (docs/contracts.md).

The public API (fuzz/api.py; importing it imports no framework):
    check(fn, framework=..., ...) -> Report    fuzz a function, as `lossnorm-fuzz check` does
    Report, Failure                            .ok, .cells, .failures, .raise_for_failures()
    cases(..., reduction=...)                  the Hypothesis strategy of framework-neutral Cases
    as_arrays(case, framework)                 a Case as native torch / jax / numpy inputs
    check_case(fn, case, framework)            what is wrong with fn's answer on one Case
"""

from fuzz.api import Failure, Report, as_arrays, cases, check, check_case
from fuzz.version import VERSION as __version__
from reference.case import Case

__all__ = ["Case", "Failure", "Report", "__version__", "as_arrays", "cases", "check", "check_case"]
