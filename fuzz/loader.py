"""Load a user's TARGET, `package.module:function` or `path/to/file.py:function`, with clear errors; check a
function's signature against its contract's call."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fuzz.report.binding import TARGET_MODULE, module_attribute_line, module_file_lines
from fuzz.report.texts import a_type_name

# How a hint tells a reduction checked as the default contract to declare itself.
DECLARE_MODE = "declare its mode (--reduction MODE on the command line, reduction=... in check)"


class LoadError(Exception):
    """The target cannot be loaded; the message says why (the command line exits 2)."""


class CallShapeError(LoadError, TypeError):
    """The function cannot be called the way its contract calls it (a usage error: the command line exits 2).
    `step_counts`: where all it misses are a micro-batch step's counts (num_tokens, ...), those: it is a
    per-micro-batch loss, and no constant binds them."""

    def __init__(self, message: str, step_counts: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.step_counts = step_counts


def check_call_shape(function: Callable[..., Any], contract: Any, name: str,
                     rank_call: tuple[tuple[str, ...], str] | None = None) -> None:
    """Raise CallShapeError when `function`'s signature cannot take the contract's call: its inputs by position,
    then its keywords. A function whose signature is unknown (a builtin, an extension's) is left to its calls. A
    wrapper's own signature is the one its call meets (a decorator may supply the wrapped function's arguments):
    `__wrapped__` is not followed. `rank_call`: a rank form's keywords and its call as text (fuzz/engines/registry.py:
    rank_call), checked instead of the contract's."""
    try:
        signature = inspect.signature(function, follow_wrapped=False)
    except (TypeError, ValueError):
        return
    keywords, call = rank_call or (contract.keywords, contract.signature)
    try:
        signature.bind(*contract.input_names, **dict.fromkeys(keywords))
    except TypeError as error:
        form = "its ranks call it" if rank_call else f"the {contract.name} contract calls it"
        step_counts = _step_counts(signature, contract, rank_call)
        hint = (_another_contract(signature, contract, rank_call) or _a_rank_form(signature, contract, rank_call)
                or _per_micro_batch(step_counts) or _bind_them(signature, contract, rank_call, function))  # the first
        raise CallShapeError(f"{name} cannot be called as {form}, {call}: {error}{hint}", step_counts) from None
    if rank_call is None:
        _refuse_a_reduction_as_the_default(function, contract, name)


def _positional(parameters: Iterable[inspect.Parameter]) -> list[inspect.Parameter]:
    """The parameters a call's arguments by position fill, in order."""
    return [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _mode_parameter(parameter: inspect.Parameter) -> bool:
    """A parameter that holds a reduction's mode: defaulted to a string, annotated as one, or named as trainers name
    one (verl's `loss_agg_mode`, TRL's `loss_type`, a `reduction`), which no mask is."""
    return (isinstance(parameter.default, str) or parameter.annotation in (str, "str")
            or re.search(r"(mode|type|reduction)$", parameter.name.lower()) is not None)


def _refuse_a_reduction_as_the_default(function: Callable[..., Any], contract: Any, name: str) -> None:
    """A function checked as the default magnitude diagnostic (no contract declared) whose third parameter is a
    mode (verl's `agg_loss(loss_mat, loss_mask, loss_agg_mode: str)`) is a loss reduction whose declaration was
    forgotten: the magnitude's call would pass its mask there. Refused before fuzzing, with how to declare it."""
    from reference.contracts import CONTRACT_NAMES, get_contract  # the registry of contracts, only for this message

    if contract.name != CONTRACT_NAMES[0]:
        return
    try:
        parameters = list(inspect.signature(function).parameters.values())  # the function written, past decorators
    except (TypeError, ValueError):
        return
    positional = _positional(parameters)
    if len(positional) < len(contract.input_names) or not _mode_parameter(mode := positional[2]):
        return
    inputs = ", ".join(get_contract("reduction").input_names)
    default = (f" (its {mode.name} defaults to {mode.default!r})" if isinstance(mode.default, str)
               else f"; its {mode.name} has no default: {_binding(function, [mode.name])}")
    raise CallShapeError(f"{name} looks like a loss reduction of ({inputs}) and a mode: its third parameter, "
                         f"{mode.name}, is a mode, where the {contract.name} diagnostic (checked when no contract "
                         f"is declared) passes {contract.input_names[2]}, {contract.signature.split(' ->')[0]}. A "
                         "reduction is declared with its mode: --reduction MODE on the command line, reduction=... "
                         f"in check{default}")


def _binding(function: Callable[..., Any], names: list[str]) -> str:
    """How to bind a function's parameters that the contract's call does not pass."""
    shown = getattr(function, "__name__", "fn")
    keywords = ", ".join(f"{parameter}=..." for parameter in names)
    return (f"bind {'it' if len(names) == 1 else 'them'} and check that: `functools.partial({shown}, {keywords})` "
            "or a lambda (for the command line, in a file of yours)")


def _missing(signature: inspect.Signature, contract: Any) -> list[str]:
    """The parameters without a default that the contract's call does not pass."""
    positional = _positional(signature.parameters.values())
    missing = [p.name for p in positional[len(contract.input_names):]
               if p.default is p.empty and p.name not in contract.keywords]
    return missing + [p.name for p in signature.parameters.values()
                      if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in contract.keywords]


def _bind_them(signature: inspect.Signature, contract: Any, rank_call: object, function: Callable[..., Any]) -> str:
    """A hint where the function needs arguments the contract's call does not pass (a mode, a scale)."""
    if rank_call is not None:
        return ""
    missing = _missing(signature, contract)
    enough = len(_positional(signature.parameters.values())) >= len(contract.input_names)
    return f"; {_binding(function, missing)}" if missing and enough else ""


def _step_counts(signature: inspect.Signature, contract: Any, rank_call: object) -> tuple[str, ...]:
    """What a whole batch's call misses, where that is only a micro-batch step's counts (CallShapeError's
    `step_counts`); () otherwise."""
    if rank_call is not None or contract.chunked is not None:
        return ()
    from reference.contracts import get_contract  # the registry of contracts, only for this message

    missing = _missing(signature, contract)
    return tuple(missing) if missing and set(missing) <= set(get_contract("accumulation").keywords) else ()


def _per_micro_batch(step_counts: tuple[str, ...]) -> str:
    """A hint for a per-micro-batch loss called as a whole batch's: the counts depend on every chunk's mask, so no
    constant binds them; it is checked as what it is."""
    if not step_counts:
        return ""
    return (f"; it takes a step's counts ({', '.join(step_counts)}): a per-micro-batch loss, checked as one "
            "(--accumulation on the command line, accumulation=True in check)")


def _another_contract(signature: inspect.Signature, contract: Any,
                      rank_call: tuple[tuple[str, ...], str] | None) -> str:
    """A hint where the function takes the loss reduction's inputs (and a mesh's keywords, as its ranks call it) but
    was checked against the default magnitude contract (no mode declared): the reduction is declared with its
    mode."""
    from reference.contracts import CONTRACT_NAMES, get_contract  # the registry of contracts, only for this message

    if contract.name != CONTRACT_NAMES[0]:
        return ""
    inputs = get_contract("reduction").input_names
    try:
        signature.bind(*inputs, **dict.fromkeys(rank_call[0] if rank_call else ()))
    except TypeError:
        return ""
    return f"; a function of ({', '.join(inputs)}) -> loss is a loss reduction: {DECLARE_MODE}"


def _a_rank_form(signature: inspect.Signature, contract: Any, rank_call: object) -> str:
    """A hint where a per-chunk function checked in process takes a rank form's keywords instead (`step_masks`,
    `group` or `axis_name`): it runs on ranks."""
    if rank_call is not None or contract.chunked is None:
        return ""
    from fuzz.engines.registry import RANKS_ENGINES, engine_call  # the engines, only for this message

    for framework, engine in RANKS_ENGINES.items():
        try:
            keywords, _ = engine_call(engine, contract)
            signature.bind(*contract.input_names, **dict.fromkeys(keywords))
        except Exception:  # not this engine's call (or its framework is not here)
            continue
        return (f"; it takes the keywords of a rank form on {framework}'s ranks ({', '.join(keywords)}): check it "
                f"there (--framework {framework} --ranks on the command line, framework=\"{framework}\", ranks=True "
                "in check)")
    return ""


@dataclass(frozen=True)
class Target:
    spec: str  # as the user wrote it
    function: Callable[..., Any]
    import_lines: tuple[str, ...]  # Python that makes `function_name` importable in a snippet
    function_name: str


def _functions_defined(module: object) -> str:
    """The functions a module defines itself (not those it imports) and its `functools.partial`s (a mode bound
    to a trainer's loss, `grpo = partial(compute_loss, loss_type="grpo")`: a target too), for a target that named
    none of them."""
    own = sorted(name for name, value in vars(module).items() if not name.startswith("_") and (
        isinstance(value, functools.partial)
        or (inspect.isfunction(value) and value.__module__ == getattr(module, "__name__", None))))
    return f" (it defines {', '.join(own)})" if own else " (it defines no public function)"


def load_target(spec: str) -> Target:
    """The function `spec` names. Loading it writes no `__pycache__/` next to the user's files: nothing of
    the suite's may appear in their working tree."""
    dont_write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return _load_target(spec)
    finally:
        sys.dont_write_bytecode = dont_write_bytecode


def _load_target(spec: str) -> Target:
    location, sep, name = spec.rpartition(":")
    # `Class.apply`: a torch.autograd.Function is called through its `apply` (a method of anything the module
    # holds by name is a target too)
    parts = name.split(".")
    if not sep or not location or not all(part.isidentifier() for part in parts):
        raise LoadError(f"TARGET must look like package.module:function or path/to/file.py:function (or "
                        f"Class.method), got {spec!r}")
    is_file = location.endswith(".py") or os.sep in location
    if location.endswith(":") or (not is_file and not all(part.isidentifier() for part in location.split("."))):
        fixed = f"{location.rstrip(':')}:{name}"
        raise LoadError(f"TARGET {spec!r}: {location!r} is neither a file (path/to/file.py) nor a module name "
                        f"(package.module); did you mean {fixed!r}? (one colon between the two parts)")
    owner = parts[0]  # the name the module holds
    if is_file:
        path = os.path.abspath(location)
        if not os.path.isfile(path):
            raise LoadError(f"{location}: no such file")
        # As `python path/to/file.py` does: the file's own folder is on the path, so the modules beside it
        # (`import helpers`) import from any working directory, in workers and ranks too (they load it here).
        folder = os.path.dirname(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module_name = f"{TARGET_MODULE}_{os.path.splitext(os.path.basename(path))[0]}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise LoadError(f"{location}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:
            raise LoadError(f"{location} raised on import: {type(error).__name__}: {error}") from error
        import_lines = (*module_file_lines(path, module_name), module_attribute_line(owner))
    else:
        # `python -m fuzz` puts the current directory on sys.path; the installed command does not, and a
        # user's `my_pkg.losses` is usually found there.
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(location)
        except ModuleNotFoundError as error:
            raise LoadError(f"cannot import module {location!r}: {error}") from error
        except Exception as error:
            raise LoadError(f"module {location!r} raised on import: {type(error).__name__}: {error}") from error
        import_lines = (f"from {location} import {owner}",)
    if not hasattr(module, owner):
        raise LoadError(f"{location} has no attribute {owner!r}{_functions_defined(module)}")
    function = getattr(module, owner)
    for depth, attribute in enumerate(parts[1:], start=1):
        if not hasattr(function, attribute):
            raise LoadError(f"{location}:{'.'.join(parts[:depth])} has no attribute {attribute!r}")
        function = getattr(function, attribute)
    if not callable(function) or inspect.isclass(function):
        raise LoadError(f"{location}:{name} is {a_type_name(function)}, not a function{_through_apply(function, spec)}")
    if "." not in name:
        return Target(spec, function, import_lines, name)
    bound = name.rpartition(".")[2]
    return Target(spec, function, (*import_lines, f"{bound} = {name}"), bound)


def _through_apply(value: object, spec: str) -> str:
    """A hint for a class that is called through its `apply` (a torch.autograd.Function): check that."""
    if not inspect.isclass(value) or not callable(getattr(value, "apply", None)):
        return ""
    return f" (a torch.autograd.Function is called through its apply: check {spec}.apply)"
