"""What about a user's function may explain its failures, said beside them: code written for one framework given
another's arrays (`--framework jax` on a torch function), beside a raise or a wrong structure; parameters that name
the inputs in another order than the call passes them (`fn(mask, losses)`), and a mode parameter left at a default
that names another mode than the declared one (`loss_agg_mode="token-mean"` under `--reduction
seq-mean-token-mean`), beside any failure; and beside a raise of arithmetic a bool mask does not allow (`1 - mask`),
how to check code written for integer masks (from its framework and contract alone). Read from the function itself,
once, before any call; it changes no verdict, and may not fail a check: a function that cannot be read gets no
hint. (A reduction checked as the default contract is refused before any call: fuzz/loader.py.)"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import re
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fuzz.judge.verdict import STRUCTURE, Failure, Verdict
from fuzz.report.texts import checked_through, named_in_a_file
from reference.contract import Contract
from reference.contracts import get_contract

# The libraries whose names a function uses that say which --framework it was written for (each that framework's
# name), and how a framework's own library is named in a hint (the Array API's arrays come from array_api_strict,
# its code from array_api_compat).
FRAMEWORK_LIBRARIES = ("torch", "jax", "numpy")
LIBRARY_OF_FRAMEWORK = {"torch": "torch", "jax": "jax", "numpy": "numpy", "array-api": "array_api_compat"}
_DEPTH = 8  # how far wrappers and helper functions are followed: a proxy may answer any attribute with a new one


@dataclass(frozen=True)
class Misfit:
    """What a function's failures may come from: `on_raise` beside a raise or a wrong structure, `on_any` (each)
    beside any failure."""

    on_raise: str | None = None
    on_any: tuple[str, ...] = ()


def misfit_of(function: Callable[..., Any], framework: str, libraries: Iterable[str],
              contract: Contract) -> Misfit | None:
    """What `function`'s failures may come from, called as `contract` says on the arrays of `framework` (an
    adapter's name, whose adapter loads `libraries`): None where nothing in the function suggests a misfit."""
    on_any = tuple(hint for hint in (_guarded(_inputs_in_another_order, function, contract),
                                     _guarded(_unbound_mode, function, contract)) if hint is not None)
    found = Misfit(_guarded(_foreign_framework, function, framework, libraries), on_any)
    return found if found.on_raise or found.on_any else None


# What each framework raises on arithmetic a bool array does not allow (`1 - mask`, `-mask`), which code written for
# integer masks does: torch's "Subtraction, the `-` operator, with a bool tensor is not supported", NumPy's "numpy
# boolean subtract", JAX's "sub does not accept dtype bool".
BOOL_ARITHMETIC = re.compile(r"bool tensors? is not supported|two bool tensors|numpy boolean (subtract|negative)|"
                             r"does not accept dtype bool")
# A bool mask as an integer one, in each framework's spelling
_AS_INTEGERS = {"torch": "{}.long()", "numpy": "{}.astype(np.int64)", "jax": "{}.astype(jnp.int32)"}


def integer_masks_hint(framework: str, contract: Contract) -> str | None:
    """What to say where the function raises on arithmetic a bool mask does not allow: the call passes its masks
    as bool arrays (the contract's), and code written for integer masks (TRL's completion_mask, verl's
    response_mask) is checked with them converted, as the trainer passes them."""
    masks = [spec.name for spec in contract.inputs if spec.kind == "bool"]
    if not masks:
        return None
    arrays = "a bool array" if len(masks) == 1 else "bool arrays"
    said = (f"the call passes {' and '.join(masks)} as {arrays} (the contract's); code written for integer masks is "
            "checked with them converted")
    if framework not in _AS_INTEGERS:
        return said
    passed = [_AS_INTEGERS[framework].format(name) if name in masks else name for name in contract.input_names]
    return (f"{said}: `{checked_through(contract, passed)}`, fn your function ({named_in_a_file('integer_masks')}; "
            "not `~` on an integer mask: ~1 is -2)")


def _guarded(read: Callable[..., str | None], *arguments: Any) -> str | None:
    try:
        return read(*arguments)
    except Exception:  # an object that answers introspection oddly: it gets no hint, never a failed check
        return None


def _stems(input_name: str) -> set[str]:
    """What a parameter's name would contain to name an input: its name's last word, singular or plural
    ("losses", "loss"), of 4 letters or more."""
    word = input_name.lower().split("_")[-1]
    return {stem for stem in (word, word.removesuffix("s"), word.removesuffix("es")) if len(stem) >= 4}


def _inputs_in_another_order(function: Callable[..., Any], contract: Contract) -> str | None:
    """Where the function's positional parameters name the contract's inputs in another order than the call passes
    them (`fn(mask, losses)` called as fn(losses, mask)): each parameter read as the one input whose name's last
    word it contains, and said only where one of them names an input the call passes elsewhere."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = [parameter.name for parameter in inspect.signature(function).parameters.values()
                  if parameter.kind in kinds][:len(contract.inputs)]
    if len(parameters) < len(contract.inputs):
        return None
    stems = [_stems(name) for name in contract.input_names]

    def named(parameter: str) -> int | None:  # the one input the parameter's name names, if one
        found = [index for index, own in enumerate(stems) if any(stem in parameter.lower() for stem in own)]
        return found[0] if len(found) == 1 else None

    order = [named(parameter) for parameter in parameters]
    if all(index is None or index == position for position, index in enumerate(order)):
        return None
    call = ", ".join(contract.input_names)
    rebound = ""
    if sorted(index for index in order if index is not None) == list(range(len(order))):  # each input named once
        passed = [contract.input_names[index] for index in order]
        rebound = f" (`{checked_through(contract, passed)}`, fn your function; {named_in_a_file('reordered')})"
    return (f"its parameters ({', '.join(parameters)}) name the inputs in another order than the call, "
            f"fn({call}): bind them in the call's order{rebound}?")


def _unbound_mode(function: Callable[..., Any], contract: Contract) -> str | None:
    """A parameter after the reduction's inputs that the call leaves at its default, a string naming another mode
    than the declared one: the function computes that mode, unless its mode is bound."""
    if "mode" not in (contract.bound or {}):
        return None
    parameters = list(inspect.signature(function).parameters.values())[len(contract.input_names):]
    for parameter in parameters:
        if isinstance(parameter.default, str) and parameter.name not in contract.keywords:
            try:
                named = get_contract(contract.name, {"mode": parameter.default}).bound["mode"]
            except ValueError:  # not a mode's name
                continue
            if named != contract.bound["mode"]:
                alias = "" if named == parameter.default else f" ({named})"
                shown = getattr(function, "__name__", "fn")
                return (f"its {parameter.name} defaults to {parameter.default!r}{alias}, where "
                        f"{contract.bound['mode']} is declared: bind it? (`functools.partial({shown}, "
                        f"{parameter.name}=...)`)")
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


def add_misfit_hint(verdict: Verdict, misfit: Misfit | None, integer_masks: str | None = None) -> None:
    """The hints beside the verdict's first failure, each where it applies: on a line of its own, as no part of
    what the function raised; `integer_masks` (integer_masks_hint's) beside a raise of arithmetic a bool mask does
    not allow."""
    if not verdict.failures:
        return
    misfit = misfit or Misfit()
    first = verdict.failures[0]
    raised = first.kind.startswith("raised ") or first.kind == STRUCTURE
    bool_arithmetic = first.kind.startswith("raised ") and BOOL_ARITHMETIC.search(first.message)
    hints = [hint for hint in (misfit.on_raise if raised else None, integer_masks if bool_arithmetic else None,
                               *misfit.on_any)
             if hint is not None and hint not in first.message]
    if hints:
        verdict.failures[0] = Failure(first.kind, first.message + "".join(f"\nhint: {hint}" for hint in hints))
