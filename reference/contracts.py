"""Every contract the suite knows, by name: the one list. A contract's module is imported on first use."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the record's own module imports this one to bind parameters
    from reference.contract import Contract

# name -> module defining CONTRACT; the first is the default (the one `check` and the API fuzz unless told).
MODULES: dict[str, str] = {
    "magnitude": "reference.magnitude",
    "reduction": "reference.reduction",
    "accumulation": "reference.accumulation",
}
CONTRACT_NAMES: tuple[str, ...] = tuple(MODULES)


def get_contract(name: str, parameters: Mapping[str, Any] | None = None) -> Contract:
    """The contract `name`, its declared parameters bound (defaults for those not given): the same object for
    the same name and parameters, so it can key caches (compiled functions, exact results)."""
    if name not in MODULES:
        raise ValueError(f"unknown contract {name!r}; the contracts are {', '.join(MODULES)}")
    contract: Contract = importlib.import_module(MODULES[name]).CONTRACT
    if not contract.parameters:
        if parameters:
            raise ValueError(f"the {name} contract has no parameters, got {dict(parameters)}")
        return contract
    canonical = contract.canonical_parameters(parameters or {})
    return _bound(name, tuple(canonical.items()))


@functools.cache
def _bound(name: str, parameters: tuple[tuple[str, Any], ...]) -> Contract:
    return importlib.import_module(MODULES[name]).CONTRACT.with_bound(dict(parameters))


def __getattr__(name: str) -> Any:  # DEFAULT_CONTRACT, imported when first asked for (no import cycle)
    if name == "DEFAULT_CONTRACT":
        return get_contract(CONTRACT_NAMES[0])
    raise AttributeError(name)
