"""What is fuzzed: a function with its contract's signature, the adapter that builds its inputs, and what it is
held to. (fuzz/run/subjects.py builds these from a built-in's name or a user's TARGET.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fuzz.judge.misfit import Misfit
from impls.frameworks import Framework
from reference.contract import Contract
from reference.tolerance import CONTRACT, Precision


@dataclass
class Subject:
    name: str
    function: Callable[..., Any]
    adapter: Framework
    contract: Contract  # with its declared parameters bound (the campaign may draw them per example instead)
    import_lines: tuple[str, ...]
    function_name: str
    wrap: str | None = None  # the compiled mode's wrapping as Python ("jax.jit({})"), for the snippet
    precision: Precision = CONTRACT  # what it is held to: the contract, or the built-ins' strict promise
    compiled: bool = False  # runs compiled code: the adapter's compile policy applies while it is called
    differentiable: bool | None = None  # None: as its framework (the registry may say otherwise)
    dtypes: tuple[str, ...] | None = None  # None: its framework's
    masked_values: str = "any"  # "finite": the user declared that masked positions are always finite
    # a built-in of a contract with declared parameters: its function for any binding of them (None for a user's
    # function, which has the one binding it was declared with)
    bind: Callable[[Contract], Callable[..., Any]] | None = None
    draws_parameters: bool = False  # each example draws the declared parameters (the campaign's built-ins)
    key: tuple[str, str] | None = None  # how a rank process finds the function (fuzz/engines/): a built-in or a TARGET
    misfit: Misfit | None = None  # a user's function: what its failures may come from (fuzz/judge/misfit.py)

    def function_for(self, contract: Contract) -> Callable[..., Any] | None:
        """The function to call on a case of `contract`: its own, or where it can be bound, the one for that
        binding of the declared parameters; None where it has none."""
        if contract is self.contract:
            return self.function
        return None if self.bind is None else self.bind(contract)

    def relations(self, contract: Contract) -> tuple[str, ...]:
        """The contract's relations it can be checked by: those that bind other parameters need `bind`."""
        return tuple(r.name for r in contract.relations if not r.rebinds or self.bind is not None)

    @property
    def has_gradients(self) -> bool:
        return self.adapter.differentiable if self.differentiable is None else self.differentiable

    @property
    def supported_dtypes(self) -> tuple[str, ...]:
        return self.adapter.dtypes if self.dtypes is None else self.dtypes
