"""A framework-neutral input: what the fuzzer draws, the reference judges and every adapter materializes.

A Case holds one value per input of its contract (float64 values already rounded to the case's dtype, bool
masks) and how to lay them out and where. Its inputs read as attributes (`case.token_log_probs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from reference.dtypes import DTYPE_NAMES, round_to


def _default_contract() -> Any:
    from reference.contracts import DEFAULT_CONTRACT  # the magnitude contract: `Case(lp, adv, mask)` as ever

    return DEFAULT_CONTRACT


class Case:
    """Inputs as float64 values already rounded to `dtype`, plus how to lay them out and where, and the
    contract they are inputs of (with its declared parameters bound).

    `Case(lp, adv, mask, dtype=...)` takes the inputs in the contract's order, or by name; masked-out
    positions may hold any value, -inf and NaN included; selected ones are finite. Cases compare by identity
    (their exact results are cached per case)."""

    __slots__ = ("__weakref__", "contract", "device", "dtype", "layout", "story", "values")

    def __init__(self, *arrays: Any, contract: Any = None, dtype: str = "float32", layout: str = "contiguous",
                 device: str = "cpu", story: tuple[tuple[str, object], ...] = (), **named: Any) -> None:
        contract = contract or _default_contract()
        names = contract.input_names
        if len(arrays) > len(names):
            raise TypeError(f"{contract.name} has {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
        given = dict(zip(names, arrays))
        for name, value in named.items():
            if name not in names:
                raise TypeError(f"{contract.name} has no input {name!r}; its inputs: {', '.join(names)}")
            if name in given:
                raise TypeError(f"input {name!r} given twice")
            given[name] = value
        missing = [name for name in names if name not in given]
        if missing:
            raise TypeError(f"missing input(s) {', '.join(missing)} of {contract.name}")
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {DTYPE_NAMES}, got {dtype!r}")
        values = {}
        for spec in contract.inputs:
            if spec.kind == "bool":
                values[spec.name] = np.asarray(given[spec.name], dtype=bool)
                continue
            value = np.asarray(given[spec.name], dtype=np.float64)
            if not np.array_equal(round_to(value, dtype), value, equal_nan=True):
                raise ValueError(f"{spec.name} holds values that are not exactly representable in {dtype}")
            values[spec.name] = value
        _fill(self, contract, values, dtype, layout, device, story)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Case is immutable: make another with .with_(...)")

    def __getattr__(self, name: str) -> np.ndarray:
        values = object.__getattribute__(self, "values")
        if name in values:
            return values[name]
        raise AttributeError(f"Case has no attribute {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled to worker processes and rank processes
        return _rebuild, (self.contract, self.values, self.dtype, self.layout, self.device, self.story)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}{tuple(value.shape)}" for name, value in self.values.items())
        return f"Case({self.contract.label}: {shapes}, {self.dtype}, {self.layout}, {self.device})"

    @property
    def sizes(self) -> dict[str, int]:
        """The size of each dimension ("batch", "tokens")."""
        return self.contract.sizes(self.values)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the first input: (batch, tokens)."""
        return tuple(next(iter(self.values.values())).shape)

    @property
    def mask(self) -> np.ndarray:
        return self.values[self.contract.mask.name]

    def with_(self, **changes: Any) -> Case:
        """A copy with some inputs (by name) or attributes (dtype, layout, device, story, contract) changed."""
        contract = changes.pop("contract", self.contract)
        attributes = {key: changes.pop(key, getattr(self, key)) for key in ("dtype", "layout", "device", "story")}
        if not changes and attributes["dtype"] == self.dtype and _kinds(contract) == _kinds(self.contract):
            return _checked(contract, self.values, **attributes)  # the same values: already checked
        values: Mapping[str, Any] = {**self.values, **changes}
        return Case(contract=contract, **attributes, **values)


def _kinds(contract: Any) -> tuple[tuple[str, str], ...]:
    return tuple((spec.name, spec.kind) for spec in contract.inputs)


def _checked(contract: Any, values: dict[str, np.ndarray], dtype: str, layout: str, device: str,
             story: tuple[tuple[str, object], ...]) -> Case:
    """A Case of values a Case already checked (converted, and representable in `dtype`), without checking
    them again: the fuzzer derives several cases from each drawn one."""
    case = object.__new__(Case)
    _fill(case, contract, values, dtype, layout, device, story)
    return case


def _fill(case: Case, contract: Any, values: dict[str, np.ndarray], dtype: str, layout: str, device: str,
          story: tuple[tuple[str, object], ...]) -> None:
    for name, value in (("contract", contract), ("values", values), ("dtype", dtype), ("layout", layout),
                        ("device", device), ("story", tuple(story))):
        object.__setattr__(case, name, value)


def _rebuild(contract: Any, values: dict[str, np.ndarray], dtype: str, layout: str, device: str,
             story: tuple[tuple[str, object], ...]) -> Case:
    return _checked(contract, values, dtype, layout, device, story)  # a pickled Case: checked where it was made
