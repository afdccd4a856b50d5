"""Subjects: a built-in's name or a user's TARGET made into what is fuzzed (fuzz.judge.subject.Subject), once per
process, from a `SubjectSpec` small enough to send to a worker process."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fuzz.judge.misfit import misfit_of
from fuzz.judge.subject import Subject
from fuzz.loader import LoadError, check_call_shape, load_target
from fuzz.report.snippet import SnippetSource
from fuzz.run.calls import WatchedAdapter, Watcher, watched
from impls.frameworks import Framework, check_modes, load_framework
from impls.registry import Implementation, get_implementation
from reference.contract import Contract
from reference.contracts import CONTRACT_NAMES, get_contract
from reference.reduction import ROW_MODES, SEQ_MEAN_TOKEN_SUM_NORM
from reference.tolerance import CONTRACT, PRECISIONS, STRICT

FRAMEWORK_CHOICES = tuple(check_modes())  # every adapter's modes: torch, torch-compile, jax, numpy, ...


@dataclass(frozen=True)
class SubjectSpec:
    """A built-in (`framework` None) or a user's `TARGET` with its `--framework`; the contract it is checked
    against (a name from reference.contracts, with its declared parameters), the precision it is held to (a
    name from reference.tolerance.PRECISIONS) and the declared domain of masked values."""

    name: str
    framework: str | None = None
    precision: str = CONTRACT.name
    contract: str = CONTRACT_NAMES[0]
    parameters: tuple[tuple[str, Any], ...] = field(default=())
    masked_values: str = "any"
    # how a snippet binds the function where `name` is not how it was passed: the Python API's function object,
    # loaded by its module's name on ranks and workers, bound in a snippet as in process (fuzz/report/binding.py)
    binding: tuple[tuple[str, ...], str] | None = None

    @property
    def bound_contract(self) -> Contract:
        return get_contract(self.contract, dict(self.parameters))

    @classmethod
    def of(cls, name: str, framework: str | None = None, *, contract: str = CONTRACT_NAMES[0],
           parameters: Mapping[str, Any] | None = None, **options: Any) -> SubjectSpec:
        return cls(name, framework, contract=contract, parameters=tuple((parameters or {}).items()), **options)


MASKED_VALUES = ("any", "finite")
ARGUMENTS = {"mode": "reduction"}  # a contract parameter that `check` takes under another name


def declared_contract(reduction: str | None = None, rows: str | None = None, l_max: float | None = None,
                      accumulation: bool = False, dp_reduce: str | None = None,
                      backward_scale: str | None = None, spell: Callable[[str], str] = lambda name: name
                      ) -> tuple[str, dict[str, Any]]:
    """The contract a `check` declares, and its parameters: the loss reduction of `reduction` (a mode, or an
    alias: grpo, dr_grpo, per-token, ...), with `accumulation` its per-chunk form over micro-batches and ranks,
    or by default the magnitude diagnostic. ValueError naming the argument that is wrong or needs another, as
    `spell` writes an argument's name (the command line: `--dp-reduce`)."""
    if not accumulation:
        for name, value in (("dp_reduce", dp_reduce), ("backward_scale", backward_scale)):
            if value is not None:
                raise ValueError(f"{spell(name)} is a convention of the per-chunk loss: it needs "
                                 f"{spell('accumulation')} too")
    if reduction is None:
        for name, value in (("rows", rows), ("l_max", l_max), ("accumulation", accumulation or None)):
            if value is not None:
                raise ValueError(f"{spell(name)} is a parameter of the loss reduction: it needs "
                                 f"{spell('reduction')} too")
        return CONTRACT_NAMES[0], {}
    parameters: dict[str, Any] = {"mode": reduction, "rows": rows, "l_max": l_max}  # None: undeclared
    if accumulation:
        parameters.update(dp_reduce=dp_reduce or "mean", backward_scale=backward_scale or "1")
    try:
        contract = get_contract("accumulation" if accumulation else "reduction", parameters)  # ValueError naming one
    except ValueError as error:  # the contract names its parameters; here they are arguments (`mode` is `reduction`)
        message = re.sub(r"^mode\b", spell(ARGUMENTS["mode"]), str(error))
        raise ValueError(re.sub(r"\b(l_max|dp_reduce|backward_scale)\b", lambda found: spell(found[1]), message)
                         ) from None
    return contract.name, dict(contract.bound)


def implied_parameters(contract_name: str, given: Mapping[str, Any], bound: Mapping[str, Any],
                       spell: Callable[[str], str] = lambda name: name) -> list[str]:
    """Notes for the parameters left undeclared that a declared spelling set (a trainer's name for a mode carries
    that trainer's convention), so that a user who meant the default sees where the checked value comes from."""
    notes = []
    for spec in get_contract(contract_name).parameters:
        raw = given.get(spec.name)
        for name, value in spec.implied(raw).items():
            if given.get(name) is None and bound.get(name) == value:
                notes.append(f"{spell(ARGUMENTS.get(spec.name, spec.name))} {raw} is a trainer's spelling that also "
                             f"means {name}={value}, its convention, checked here; {spell(name)} declares another")
    return notes


def unread_parameters(bound: Mapping[str, Any], rows: str | None, l_max: float | None,
                      spell: Callable[[str], str] = lambda name: name) -> list[str]:
    """Notes for declared parameters that the bound mode does not read (L_max outside fixed length, rows in a
    mode without D): valid, and set aside so that one reduction has one label, but a command naming them may
    have meant another mode."""
    mode = bound.get("mode")
    notes = []
    if l_max is not None and bound.get("l_max") is None:
        notes.append(f"{spell('l_max')} is read only by {SEQ_MEAN_TOKEN_SUM_NORM} (fixed-length): {mode} does not "
                     "divide by L_max, so it is set aside")
    if rows is not None and mode not in ROW_MODES:
        notes.append(f"{spell('rows')} says what D counts in the modes that divide by D: {mode} has no D, so it "
                     "is set aside")
    return notes


def available_adapter(name: str) -> Framework:
    """The adapter of framework `name`; LoadError (exit 2) where the framework does not import here."""
    try:
        return load_framework(name)
    except Exception as error:
        raise LoadError(f"framework {name} is unavailable here: {type(error).__name__}: {error}") from error


def subject_for(implementation: Implementation, draws_parameters: bool | None = None) -> Subject:
    """A built-in implementation as a fuzzing subject, held to the built-ins' strict promise (its snippet
    imports it from this checkout). A built-in of a contract with declared parameters can be bound to any of
    them; with `draws_parameters` (the default where the contract has a menu of them) each example draws one."""
    contract = implementation.contract
    function = implementation.function_for(contract)
    draws = bool(contract.parameter_menu) if draws_parameters is None else draws_parameters
    return Subject(implementation.name, function, implementation.adapter, contract,
                   (f"from {function.__module__} import {function.__name__}",), function.__name__,
                   precision=STRICT, compiled=implementation.compiled,
                   differentiable=implementation.differentiable, dtypes=implementation.dtypes,
                   bind=implementation.function_for if contract.parameters else None, draws_parameters=draws)


def function_subject(name: str, function: Callable[..., Any], framework: str, import_lines: tuple[str, ...],
                     function_name: str, spec: SubjectSpec) -> Subject:
    """A function with its contract's signature as a fuzzing subject, run as the `framework` mode says (its
    adapter compiles it for the compiled modes: torch-compile, jax). Raises LoadError when the framework does
    not load here, CallShapeError when the function cannot take the contract's call."""
    adapter_name, mode = check_modes()[framework]
    adapter = available_adapter(adapter_name)
    contract = spec.bound_contract
    check_call_shape(function, contract, name)
    wrap = adapter.wrap_text(mode, contract)
    return Subject(name, adapter.wrap(function, framework, contract), adapter, contract, import_lines, function_name,
                   wrap=wrap, precision=PRECISIONS[spec.precision], compiled=wrap is not None,
                   masked_values=spec.masked_values,
                   misfit=misfit_of(function, adapter_name, adapter.modules, contract))


def check_subject(spec: SubjectSpec) -> Subject:
    """The user's function as a fuzzing subject; raises LoadError for anything that stops it loading."""
    assert spec.framework is not None
    target = load_target(spec.name)
    import_lines, function_name = spec.binding or (target.import_lines, target.function_name)
    return function_subject(spec.name, target.function, spec.framework, import_lines, function_name, spec)


_BUILT: dict[SubjectSpec, Subject] = {}


def build_subject(spec: SubjectSpec) -> Subject:
    """The subject a spec names, built once per process (a compiled function keeps its compiled graphs)."""
    if spec not in _BUILT:
        if spec.framework is None:
            implementation = get_implementation(spec.name, spec.contract)
            if spec.parameters:
                implementation = implementation.bind(**dict(spec.parameters))
            _BUILT[spec] = subject_for(implementation, draws_parameters=False if spec.parameters else None)
        else:
            _BUILT[spec] = check_subject(spec)
    return _BUILT[spec]


def snippet_source(subject: Subject) -> SnippetSource:
    return SnippetSource(subject.name, subject.adapter.name, subject.import_lines, subject.function_name,
                         subject.wrap, tuple(subject.adapter.layouts), subject.precision.name)


def watch_subject(subject: Subject, watcher: Watcher) -> Subject:
    """The subject with every call of its function (and every VJP) run through `watcher`; a bound function is
    watched once per binding (a compiled function's caches are per function object)."""
    adapter = WatchedAdapter(subject.adapter, watcher, subject.compiled)
    bind = None
    if subject.bind is not None:
        unwatched = subject.bind

        @functools.cache
        def bind(contract: Contract) -> Callable[..., Any]:
            return watched(unwatched(contract), adapter)

    return replace(subject, function=watched(subject.function, adapter), adapter=adapter, bind=bind)
