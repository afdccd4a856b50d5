"""What about a user's function and the call the suite makes of it may explain why it raises or returns the wrong
structure, said beside that failure: a loss reduction checked as the default magnitude diagnostic (no mode was
declared, and its signature fits both calls), or a function written for one framework given another's arrays.
Both are read from the function itself, once, before any call; neither changes a verdict."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

from fuzz.judge.verdict import STRUCTURE, Verdict

# The libraries a function's module imports that say which --framework it was written for.
FRAMEWORK_OF_LIBRARY = {"torch": "torch", "jax": "jax", "numpy": "numpy"}


def takes_reduction_inputs(signature: inspect.Signature) -> bool:
    """Whether a function of this signature can be called as the loss reduction calls it (its inputs by position)."""
    from reference.contracts import get_contract  # the registry of contracts, only for this question

    try:
        signature.bind(*get_contract("reduction").input_names)
    except TypeError:
        return False
    return True


def misfit_hint(function: Callable[..., Any], framework: str, libraries: Iterable[str], contract: Any) -> str | None:
    """What a raise or a wrong structure of `function`, called as `contract` says on `framework`'s arrays (whose
    adapter loads `libraries`), may come from: None where nothing in the function suggests a misfit."""
    hints = [hint for hint in (_undeclared_reduction(function, contract), _foreign_framework(function, framework,
                                                                                              libraries)) if hint]
    return "; ".join(hints) or None


def _undeclared_reduction(function: Callable[..., Any], contract: Any) -> str | None:
    from reference.contracts import CONTRACT_NAMES, get_contract

    if contract.name != CONTRACT_NAMES[0]:  # a contract was declared
        return None
    try:
        signature = inspect.signature(function, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    if not takes_reduction_inputs(signature):
        return None
    reduction = get_contract("reduction")
    call = contract.signature.split(" ->")[0]
    return (f"no contract was declared, so it is checked as the {contract.name} diagnostic, {call}, and "
            f"it also takes a loss reduction's ({', '.join(reduction.input_names)}): if it is one, declare its mode "
            "(--reduction MODE on the command line, reduction=... in check)")


def _foreign_framework(function: Callable[..., Any], framework: str, libraries: Iterable[str]) -> str | None:
    """Where the function's module imports another framework's library and none of the checked one's."""
    imported = _libraries_imported(function)
    own = list(dict.fromkeys(library.split(".")[0] for library in libraries))
    if imported.intersection(own):
        return None
    foreign = [library for library in FRAMEWORK_OF_LIBRARY if library in imported]
    if not foreign:
        return None
    suggested = FRAMEWORK_OF_LIBRARY[foreign[0]]
    named = [library for library in own if library in FRAMEWORK_OF_LIBRARY] or sorted(own)  # not ml_dtypes
    return (f"its module imports {' and '.join(foreign)}, not {' or '.join(named)}, and it is given "
            f"{framework}'s arrays (--framework {framework}): written for --framework {suggested}?")


def _libraries_imported(function: Callable[..., Any]) -> set[str]:
    """The top-level packages of the modules the function's own module has imported by name (`import torch`,
    `import jax.numpy as jnp`), for a function, a bound method, a partial or a decorated function."""
    found: set[str] = set()
    for inner in _unwrapped(function):
        for value in getattr(inner, "__globals__", {}).values():
            if isinstance(value, types.ModuleType):
                found.add(value.__name__.split(".")[0])
    return found


def _unwrapped(function: Any) -> list[Any]:
    """The function and whatever it wraps (a partial's function, a method's, a decorator's `__wrapped__`)."""
    seen, chain = set(), []
    while function is not None and id(function) not in seen:
        seen.add(id(function))
        chain.append(function)
        if isinstance(function, functools.partial):
            function = function.func
        elif inspect.ismethod(function):
            function = function.__func__
        else:
            function = getattr(function, "__wrapped__", None)
    return chain


def add_misfit_hint(verdict: Verdict, hint: str | None) -> None:
    """The hint beside the verdict's first failure where it raised or returned the wrong structure."""
    if hint is None or not verdict.failures:
        return
    first = verdict.failures[0]
    if (first.kind.startswith("raised ") or first.kind == STRUCTURE) and hint not in first.message:
        joint = "\n" if "\n" in first.message else ": "  # after a many-line error (torch's), on a line of its own
        verdict.failures[0] = type(first)(first.kind, f"{first.message}{joint}{hint}")
