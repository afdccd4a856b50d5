"""What about a user's function may explain why it raises or returns the wrong structure, said beside that
failure: code written for one framework given another's arrays (`--framework jax` on a torch function). Read from
the function itself, once, before any call; it changes no verdict, and may not fail a check: a function that
cannot be read gets no hint. (A reduction checked as the default contract is refused before any call:
fuzz/loader.py.)"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

from fuzz.judge.verdict import STRUCTURE, Verdict

# The libraries whose names a function uses that say which --framework it was written for (each that framework's
# name), and how a framework's own library is named in a hint (the Array API's arrays come from array_api_strict,
# its code from array_api_compat).
FRAMEWORK_LIBRARIES = ("torch", "jax", "numpy")
LIBRARY_OF_FRAMEWORK = {"torch": "torch", "jax": "jax", "numpy": "numpy", "array-api": "array_api_compat"}
_DEPTH = 8  # how far wrappers and helper functions are followed: a proxy may answer any attribute with a new one


def misfit_hint(function: Callable[..., Any], framework: str, libraries: Iterable[str]) -> str | None:
    """What a raise or a wrong structure of `function`, called on the arrays of `framework` (an adapter's name,
    whose adapter loads `libraries`), may come from: None where nothing in the function suggests a misfit, or
    where it cannot be read."""
    try:
        return _foreign_framework(function, framework, libraries)
    except Exception:  # an object that answers introspection oddly: it gets no hint, never a failed check
        return None


def _foreign_framework(function: Callable[..., Any], framework: str, libraries: Iterable[str]) -> str | None:
    """Where the names the function's code uses come from another framework's library and none from the checked
    one's (`torch.where`, or `where` imported from torch, in a function given jax arrays)."""
    used = _libraries_used(function)
    own = list(dict.fromkeys(library.split(".")[0] for library in libraries))
    foreign = [library for library in FRAMEWORK_LIBRARIES if library in used and library not in own]
    # torch and JAX code often uses NumPy too (constants, dtypes): beside either, NumPy says nothing of the framework
    telling = set(own) - ({"numpy"} if set(foreign) & {"torch", "jax"} else set())
    if not foreign or used & telling:
        return None
    named = LIBRARY_OF_FRAMEWORK.get(framework, " or ".join(own))
    besides = "" if named in used else f", not {named},"
    return (f"its code uses {' and '.join(foreign)}{besides} and it is given {framework}'s arrays: written for "
            f"--framework {foreign[0]}?")


def _libraries_used(function: Callable[..., Any]) -> set[str]:
    """The top-level packages of the global names the function's code uses (`torch.where`, `jnp.sum`, a `where`
    imported from torch), following its wrappers, its closure, and the functions of its own module it calls."""
    found: set[str] = set()
    seen: set[int] = set()
    pending = [(inner, 0) for inner in _unwrapped(function)]
    while pending:
        current, depth = pending.pop()
        code, globals_ = getattr(current, "__code__", None), getattr(current, "__globals__", None)
        if id(current) in seen or not isinstance(code, types.CodeType) or not isinstance(globals_, dict):
            continue
        seen.add(id(current))
        values = [globals_[name] for name in _names(code) if name in globals_]
        for cell in getattr(current, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # a closure variable not yet assigned
                values.append(cell.cell_contents)
        for value in values:
            if isinstance(value, types.FunctionType) and value.__globals__ is globals_:  # a helper beside it
                if depth < _DEPTH:
                    pending.append((value, depth + 1))
            elif (library := _library_of(value)) is not None:
                found.add(library)
    return found


def _names(code: types.CodeType) -> set[str]:
    """The global names a code object and the functions defined inside it load (`co_names` also holds the
    attributes it reads: `np.where` would count a global `where`)."""
    names = {instruction.argval for instruction in dis.get_instructions(code) if instruction.opname == "LOAD_GLOBAL"}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def _library_of(value: Any) -> str | None:
    """The top-level package of a module, or of a function or class it defines (None for other values)."""
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[0]
    module = getattr(value, "__module__", None) if callable(value) else None
    return module.split(".")[0] if isinstance(module, str) else None


def _unwrapped(function: Any) -> list[Any]:
    """The function and whatever it wraps (a partial's function, a method's, a decorator's `__wrapped__`)."""
    chain: list[Any] = []
    while function is not None and len(chain) < _DEPTH and all(function is not seen for seen in chain):
        chain.append(function)
        if isinstance(function, functools.partial):
            function = function.func
        elif inspect.ismethod(function):
            function = function.__func__
        else:
            function = getattr(function, "__wrapped__", None)
    return chain


def add_misfit_hint(verdict: Verdict, hint: str | None) -> None:
    """The hint beside the verdict's first failure where it raised or returned the wrong structure: on a line of
    its own, as no part of what the function raised."""
    if hint is None or not verdict.failures:
        return
    first = verdict.failures[0]
    if (first.kind.startswith("raised ") or first.kind == STRUCTURE) and hint not in first.message:
        verdict.failures[0] = type(first)(first.kind, f"{first.message}\nhint: {hint}")
