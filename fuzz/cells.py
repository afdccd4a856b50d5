"""The cells of a run: which subject is fuzzed, the plan of (subject, device, check, dtype) cells, and how one
cell is run. A `SubjectSpec` names a subject in a form a worker process can rebuild it from."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fuzz.calls import CallTimedOut, WatchedAdapter, Watcher, watched
from fuzz.campaign import CellResult, Subject, fuzz_cell
from fuzz.gradients import gradient_example
from fuzz.interrupted import TIMEOUT, SnippetSource, interrupted_cell, timed_out
from fuzz.loader import LoadError, load_target
from impls.frameworks import Framework, check_modes, load_framework
from impls.registry import Implementation, get_implementation
from reference.tolerance import CONTRACT, PRECISIONS, STRICT

FRAMEWORK_CHOICES = tuple(check_modes())  # every adapter's modes: torch, torch-compile, jax, numpy, ...


@dataclass(frozen=True)
class SubjectSpec:
    """A built-in (`framework` None) or a user's `TARGET` with its `--framework`, and the precision it is
    held to (a name from reference.tolerance.PRECISIONS)."""

    name: str
    framework: str | None = None
    precision: str = CONTRACT.name


def subject_for(implementation: Implementation) -> Subject:
    """A built-in implementation as a fuzzing subject, held to the built-ins' strict promise (its snippet
    imports it from this checkout)."""
    function = implementation.function
    return Subject(implementation.name, function, implementation.adapter,
                   (f"from {function.__module__} import {function.__name__}",), function.__name__,
                   precision=STRICT, compiled=implementation.compiled,
                   differentiable=implementation.differentiable, dtypes=implementation.dtypes)


def check_subject(target_spec: str, framework: str, precision: str = CONTRACT.name) -> Subject:
    """The user's function as a fuzzing subject; raises LoadError for anything that stops it loading."""
    target = load_target(target_spec)
    return function_subject(target_spec, target.function, framework, target.import_lines, target.function_name,
                            precision)


def function_subject(name: str, function: Callable[..., Any], framework: str, import_lines: tuple[str, ...],
                     function_name: str, precision: str = CONTRACT.name) -> Subject:
    """A function with the contract's signature as a fuzzing subject, run as the `framework` mode says (its
    adapter compiles it for the compiled modes: torch-compile, jax). Raises LoadError when the framework does
    not load here."""
    adapter_name, mode = check_modes()[framework]
    adapter = available_adapter(adapter_name)
    return Subject(name, adapter.wrap(function, framework), adapter, import_lines, function_name, wrap=mode.wrap,
                   precision=PRECISIONS[precision], compiled=mode.wrap is not None)


def available_adapter(name: str) -> Framework:
    """The adapter of framework `name`; LoadError (exit 2) where the framework does not import here."""
    try:
        return load_framework(name)
    except Exception as error:
        raise LoadError(f"framework {name} is unavailable here: {type(error).__name__}: {error}") from error


_BUILT: dict[SubjectSpec, Subject] = {}


def build_subject(spec: SubjectSpec) -> Subject:
    """The subject a spec names, built once per process (a compiled function keeps its compiled graphs)."""
    if spec not in _BUILT:
        _BUILT[spec] = (subject_for(get_implementation(spec.name)) if spec.framework is None
                        else check_subject(spec.name, spec.framework, spec.precision))
    return _BUILT[spec]


@dataclass(frozen=True)
class CellTask:
    """One cell, small enough to send to a worker process."""

    subject: SubjectSpec
    device: str
    dtype: str
    check: str  # "forward" or "gradients"
    examples: int
    seed: int


def plan_cells(subjects: Sequence[tuple[SubjectSpec, Sequence[str]]], dtypes: Sequence[str],
               devices: Sequence[str] | None, max_examples: int, seed: int, gradients: bool,
               gradient_examples: int) -> list[CellTask]:
    """Every (subject, device, check, dtype) cell; each subject's forward cells before its gradient cells."""
    checks = [("forward", max_examples)] + ([("gradients", gradient_examples)] if gradients else [])
    return [
        CellTask(spec, device, dtype, check, examples, seed)
        for spec, subject_devices in subjects
        for device in subject_devices if devices is None or device in devices
        for check, examples in checks
        for dtype in dtypes
    ]


def snippet_source(subject: Subject) -> SnippetSource:
    return SnippetSource(subject.name, subject.adapter.name, subject.import_lines, subject.function_name,
                         subject.wrap, tuple(subject.adapter.layouts), subject.precision.name)


def watch_subject(subject: Subject, watcher: Watcher) -> Subject:
    """The subject with every call of its function (and every VJP) run through `watcher`."""
    adapter = WatchedAdapter(subject.adapter, watcher, subject.compiled)
    return replace(subject, function=watched(subject.function, adapter), adapter=adapter)


def fuzz_task(subject: Subject, task: CellTask, watcher: Watcher) -> CellResult:
    """Fuzz one cell of `subject`; a call that overruns the watcher's time limit fails the cell with its case."""
    if (task.check == "gradients" and not subject.has_gradients) or task.dtype not in subject.supported_dtypes:
        return CellResult(subject.name, task.device, task.dtype, task.check, applicable=False)
    started = time.perf_counter()
    try:
        cell = fuzz_cell(watch_subject(subject, watcher), dtype=task.dtype, device=task.device,
                         layouts=subject.adapter.layouts, max_examples=task.examples, seed=task.seed,
                         check=task.check, example_check=gradient_example if task.check == "gradients" else None)
    except CallTimedOut as stopped:
        cell = interrupted_cell(snippet_source(subject), task.device, task.dtype, task.check, stopped.call,
                                timed_out(stopped.seconds, stopped.call), TIMEOUT,
                                seconds=time.perf_counter() - started)
    status = "ok" if cell.ok else f"FAIL ({len(cell.bugs) or 1} distinct)"
    print(f"  {task.check} of {subject.name} on {task.device} in {task.dtype}: {status}, {cell.examples} examples, "
          f"worst err/tol {cell.worst:.3g}, {cell.worst_ulps:.3g} ulp, {cell.seconds:.1f} s",
          file=sys.stderr, flush=True)
    return cell


def run_cell(task: CellTask, watcher: Watcher) -> CellResult:
    """Fuzz one cell of a subject named by its spec (built once per process), printing a progress line."""
    return fuzz_task(build_subject(task.subject), task, watcher)
