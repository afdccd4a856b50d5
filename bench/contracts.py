"""Which contracts the benchmarks time, and with which declared parameters.

Only names and records here (reference/contracts.py and the registry's listing): nothing imports a framework,
so `--contracts` and `--reduction` are checked at parse time, as the other selections.
"""

from __future__ import annotations

from typing import Any

from impls.registry import builtin_names
from reference.contract import Contract
from reference.contracts import CONTRACT_NAMES, get_contract

# Every contract with single-process built-ins, in the suite's order: magnitude and reduction. The accumulation
# contract's built-ins are per-chunk functions that an engine calls on each micro-batch or rank (registered as
# sharded), so a single call of one is not the function's throughput: they are left out.
BENCHMARKED: tuple[str, ...] = tuple(name for name in CONTRACT_NAMES if builtin_names(name))
# The contract whose mode `--reduction` chooses (the rows run its default mode, token-mean, unless told).
REDUCTION = "reduction"


def canonical_mode(text: str) -> str:
    """The reduction mode `text` names (an alias resolved); ValueError naming the choices, from the contract's
    own Parameter."""
    return str(get_contract(REDUCTION).parameter("mode").value(text.strip()))


def mode_spellings() -> str:
    """Every spelling of a reduction mode, as --reduction's help lists them."""
    return get_contract(REDUCTION).parameter("mode").spellings()


def parameters_for(contract: str, mode: str | None = None) -> dict[str, Any]:
    """The declared parameters a contract's rows run with: none for a contract without any; for the reduction,
    `mode` (default: the contract's default) with the campaign's other settings for it: rows=all, or the
    convention of the trainer whose spelling `mode` is (as `check --reduction` reads it), and the campaign's L_max
    for fixed length, which needs one (its value does not change what a call reads)."""
    if contract != REDUCTION or mode is None:
        return {}
    reduction = get_contract(REDUCTION)
    wanted = {"mode": canonical_mode(mode), "rows": "all", **reduction.implied_by({"mode": mode})}
    return dict(next(entry for entry in reduction.parameter_menu
                     if all(entry[name] == value for name, value in wanted.items() if name in entry)))


def bench_contract(contract: str, mode: str | None = None) -> Contract:
    """The bound contract a row of `contract` times (and whose bytes its floor reads)."""
    return get_contract(contract, parameters_for(contract, mode))
