"""The Python API, for a trainer's own test suite:

    from fuzz import check
    report = check(my_normalize, framework="torch", dtypes=["bfloat16", "float32"], max_examples=100, seed=0)
    report.raise_for_failures()   # AssertionError: the shrunk case and a runnable snippet

The function runs in this process by default, each call under the time limit in one helper thread that serves
the calls in turn (an overrunning call fails its cell and is interrupted in its thread; one blocked in C code
cannot be, and keeps running in the background until it returns).
A segfault in-process takes the process down; `workers=N` runs the cells in N worker processes instead,
as the command line does, for a function importable by its module and name.

For your own Hypothesis tests: `cases(...)` draws framework-neutral Cases, `as_arrays(case, framework)`
turns one into native inputs (dtype, device, layout), and `check_case(fn, case, framework)` lists what is
wrong with fn's answer on it.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fuzz.engines.registry import CHOICES as SHARDED_CHOICES
from fuzz.engines.registry import RANKS_ENGINES, engine_call, engine_named, rank_call
from fuzz.loader import CallShapeError, check_call_shape, load_target
from fuzz.report.binding import display_name, snippet_binding
from fuzz.report.matrix import render_matrix
from fuzz.report.results import CellResult, bug_keys, case_title, one_per_cell
from fuzz.report.terminal import bugs, joined, other_cells, summary, wrap
from fuzz.report.texts import for_terminal
from fuzz.run.calls import DEFAULT_TIMEOUT, ThreadWatcher
from fuzz.run.cell import fuzz_task
from fuzz.run.plan import default_gradient_examples, gradients_checked, no_dtype_held, plan_cells
from fuzz.run.processes import refuse_while_starting
from fuzz.run.subjects import (
    FRAMEWORK_CHOICES,
    MASKED_VALUES,
    SubjectSpec,
    available_adapter,
    declared_contract,
    function_subject,
)
from impls.frameworks import check_modes, load_framework
from reference.case import Case
from reference.contract import Contract
from reference.contracts import get_contract
from reference.dtypes import DTYPE_NAMES
from reference.tolerance import CONTRACT, PRECISIONS

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


CELL_FAILED = "cell failed"  # the kind of a failure with no case to show (a worker died): no distinct bug


@dataclass(frozen=True)
class Failure:
    """One distinct failure of one cell: its kind (the first check that failed: "raised ValueError",
    "non-finite output", "<output> out of tolerance", "call timed out", ...), its messages, the
    minimal case (the labelled draws that made it) and a snippet that reproduces it."""

    kind: str
    message: str
    implementation: str
    device: str
    dtype: str
    check: str  # "forward", "gradients", or an engine's row ("shard_map ranks R2xG1 gradients")
    minimal_case: dict[str, object]
    snippet: str | None

    def __str__(self) -> str:
        return self.text()

    def text(self, snippet: bool = True) -> str:
        """What failed, on which case, and (with `snippet`) the snippet that reproduces it."""
        case = ", ".join(f"{label}={value!r}" for label, value in self.minimal_case.items() if label != "seed")
        return (f"{self.check} of {self.implementation} on {self.device} in {self.dtype}: {for_terminal(self.message)}"
                + (f"\n{case_title(self.minimal_case)}: {case}" if case else "")
                + (f"\nreproduce with this snippet:\n\n{self.snippet}" if self.snippet and snippet else ""))


@dataclass(frozen=True)
class Report:
    """Every cell (device x check x dtype) that was fuzzed, and what failed."""

    cells: tuple[CellResult, ...]
    dtypes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return all(cell.ok for cell in self.cells)

    @property
    def failures(self) -> list[Failure]:
        """Every distinct bug of every cell (each shrunk on its own), and any failure without a case."""
        found = []
        for cell in self.cells:
            where = (cell.subject, cell.device, cell.dtype, cell.check)
            found += [Failure(CELL_FAILED, problem, *where, {}, None) for problem in cell.problems]
            found += [Failure(bug.kind, "\n".join(bug.failures), *where, dict(bug.story), bug.snippet)
                      for bug in cell.bugs]
        return found

    def raise_for_failures(self) -> None:
        """Raise AssertionError unless everything conforms: each distinct bug (fuzz/report/results.py, `bug_keys`)
        as the terminal shows it, within 100 columns: its first failure with its shrunk case and snippet, then an item
        for the other cells where it shows (the same bug in four dtypes and five splits would otherwise fill a CI log
        with twenty cases; `failures` keeps every one, each with its case and snippet). pytest shows the message
        alone, not this method's source."""
        __tracebackhide__ = True  # pytest reads it
        if self.ok:
            return
        failures = self.failures
        found: dict[tuple[str, str, str, str], list[Failure]] = {}
        caseless = [failure for failure in failures if failure.kind == CELL_FAILED]  # counted apart, as the summary
        cased = [failure for failure in failures if failure.kind != CELL_FAILED]
        key = bug_keys((failure.implementation, "", failure.check, failure.kind) for failure in cased)
        for failure in cased:  # a report's cells share one contract
            found.setdefault(key(failure.implementation, "", failure.check, failure.kind), []).append(failure)
        texts = [joined(wrap(failure.text())) for failure in caseless]
        for occurrences in found.values():
            first, *others = one_per_cell(occurrences, lambda f: (f.implementation, f.device, f.dtype, f.check))
            lines = wrap(first.text(snippet=False))
            if first.snippet:
                lines += ["reproduce with this snippet:", "", first.snippet.rstrip("\n")]
            if others:
                lines += ["", f"the same bug in {len(others)} more cell{'s' * (len(others) != 1)} (each one's case "
                              "and snippet: Report.failures):",
                          *other_cells(first.kind, [(f.device, f.dtype, f.check, f.message) for f in others])]
            texts.append(joined(lines))
        apart = f", and {len(caseless)} cell(s) failed without a case" if caseless else ""
        header = f"{len(failures)} failure(s), {len(found)} distinct bug(s){apart}:"
        raise AssertionError("\n\n".join([header, *texts]))

    def __str__(self) -> str:
        """The terminal's view: one line per implementation and contract, then every bug with its snippet."""
        return joined([*summary(self.cells), *bugs(self.cells)])

    @property
    def matrix(self) -> str:
        """The whole conformance matrix (wide: a row per implementation, device and check; a column per dtype)."""
        return render_matrix(self.cells, self.dtypes, {})


def check(
    fn: Callable[..., Any] | str,
    *,
    framework: str | None = None,
    sharded: str | None = None,
    gradients: bool | None = None,
    dtypes: Sequence[str] = DTYPE_NAMES,
    devices: Sequence[str] | None = None,
    max_examples: int | None = None,
    gradient_examples: int | None = None,
    seed: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int | None = None,
    fail_fast: bool = False,
    precision: str = CONTRACT.name,
    reduction: str | None = None,
    rows: str | None = None,
    l_max: float | None = None,
    masked_values: str = "any",
    accumulation: bool = False,
    ranks: bool = False,
    dp_reduce: str | None = None,
    backward_scale: str | None = None,
) -> Report:
    """Fuzz `fn`, a function with the contract's signature, against the exact reference, as
    `lossnorm-fuzz check` does. `fn` is a function, or a "package.module:function" / "path.py:function" string.
    `framework`: one of FRAMEWORK_CHOICES (torch, torch-compile, jax: wrapped in jax.jit, except a per-chunk
    function, numpy, ...); or, instead, `sharded`: "torch" or "jax", `fn` a per-rank function run on every mesh of
    torch.distributed ranks or as the body of jax.shard_map (`check --sharded`, docs/sharded.md; `fn` importable by
    its module and name), of the magnitude diagnostic or, with `reduction`, of the loss reduction.
    `gradients`: the backward is fuzzed too (autograd, jax.vjp) against the exact VJP; by default (None)
    wherever the framework differentiates (torch, torch-compile, jax), False for the forward only.
    `precision`: "contract" (default) or "strict" (docs/tolerance.md). `workers`: None runs in this
    process; N runs the cells in N worker processes (the function must then be importable by its module and
    name; a crash or hang there fails its cell instead of this process).

    The contract (each one's signature: `python -m fuzz check --help`, docs/contracts.md): by default the magnitude
    diagnostic; with `reduction` (a mode: "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm",
    "seq-mean-token-sum", "token-sum", or an alias such as "grpo", "dr_grpo", "per-sequence"), the loss reduction,
    with `rows` ("all" or "nonempty": what D counts; left None, "all", or the convention of the trainer whose
    spelling `reduction` is: "nonempty" for tunix's "sequence-mean-token-mean") and `l_max` (fixed-length's L_max).
    `masked_values="finite"`: fn's padding is finite by construction, and the verdict holds under that assumption.
    With `accumulation`, `fn` is the per-chunk loss of the reduction over a step split into micro-batches and ranks,
    called with the step's global counts as keywords (`dp_reduce` "mean" or "sum", `backward_scale` "1" or "1/G"),
    on every chunk in this process; with `ranks` too, its rank form on torch.distributed ranks under DDP (framework
    "torch"), or under jax.shard_map over host CPU devices with a lax.scan over each device's micro-batches
    (framework "jax"), computing the counts itself (then `fn` must be importable by its module and name).
    `max_examples` defaults to 40 per cell, 20 with `accumulation` (five splits per dtype), 10 with `ranks` or
    `sharded`.

    Raises ValueError for bad arguments, fuzz.loader.LoadError when the function or the framework cannot be
    loaded, and RuntimeError for `workers`, `ranks` or `sharded` in a process that may not start processes (a daemon: a
    multiprocessing.Pool worker)."""
    refuse_while_starting()
    if not (isinstance(fn, str) or callable(fn)):
        raise TypeError(f"fn must be a function or a 'module:function' string, got {type(fn).__name__}")
    if (framework is None) == (sharded is None):
        raise TypeError("check takes framework= (one of {}) or, for a per-rank function, sharded= ('torch' or "
                        "'jax'): one of the two, got {}".format(", ".join(FRAMEWORK_CHOICES),
                                                              "neither" if framework is None else "both"))
    if sharded is not None:
        if sharded not in SHARDED_CHOICES:
            raise ValueError(f"sharded must be one of {SHARDED_CHOICES}, got {sharded!r}")
        if accumulation or ranks:  # two engines for one function: the per-chunk loss has its own ranks
            raise ValueError(f"sharded= runs a per-rank function on a mesh; a per-micro-batch loss on data-parallel "
                             f"ranks is framework={sharded!r}, accumulation=True, ranks=True")
        framework = engine_named(sharded).framework
    if framework not in FRAMEWORK_CHOICES:
        raise ValueError(f"framework must be one of {FRAMEWORK_CHOICES}, got {framework!r}")
    dtypes = _names("dtypes", dtypes, DTYPE_NAMES)
    if devices is not None:
        devices = _names("devices", devices, None)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    if max_examples is None:
        max_examples = 10 if ranks or sharded else 20 if accumulation else 40
    _positive("max_examples", max_examples)
    if gradient_examples is not None:
        _positive("gradient_examples", gradient_examples)
    if workers is not None:
        _positive("workers", workers)
    if gradients is not None and not isinstance(gradients, bool):
        raise TypeError(f"gradients must be True, False or None (wherever the framework differentiates), got "
                        f"{type(gradients).__name__} {gradients!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):  # the type wrong: as the ints above
        raise TypeError(f"timeout must be a positive number of seconds, got {type(timeout).__name__} {timeout!r}")
    if not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    _check_masked_values(masked_values)
    if ranks and (not accumulation or framework not in RANKS_ENGINES):
        raise ValueError("ranks=True runs a per-chunk loss on data-parallel ranks (torch.distributed under DDP, or "
                         "jax.shard_map): it needs accumulation=True and framework='torch' or 'jax'")
    contract, parameters = declared_contract(reduction, rows, l_max, accumulation, dp_reduce, backward_scale)
    on_ranks = ranks or sharded is not None  # fn runs on an engine's ranks, which load it by name
    asking = "ranks=True" if ranks else "sharded=" if sharded else "workers="
    if (workers or on_ranks) and multiprocessing.current_process().daemon:
        raise RuntimeError(f"{asking} starts processes, and this process is a daemon "
                           "(a multiprocessing.Pool worker), which Python lets start none: call check from the main "
                           "process or a concurrent.futures.ProcessPoolExecutor worker"
                           + ("" if on_ranks else ", or pass workers=None to run it in this process"))
    spec = None  # what the other processes import, where there are any
    if workers or on_ranks:
        spec = fn if isinstance(fn, str) else _spec_of(fn, asking)
    if isinstance(fn, str):
        target = load_target(fn)
        name, function, import_lines, function_name = fn, target.function, target.import_lines, target.function_name
    else:
        name, function = display_name(fn), fn
        import_lines, function_name = snippet_binding(fn)
    # workers and ranks load a function object by its module's name; its snippet binds it as in process
    binding = None if isinstance(fn, str) else (import_lines, function_name)
    subject_spec = SubjectSpec.of(name, framework, contract=contract, parameters=parameters, precision=precision,
                                  masked_values=masked_values)
    # a rank form runs on its engine's ranks, which load it by name: nothing to wrap here (jax.jit would want the
    # in-process keywords static)
    try:
        if on_ranks:
            contract_bound = subject_spec.bound_contract
            check_call_shape(function, contract_bound, name, engine_call(sharded, contract_bound) if sharded else
                             rank_call(framework, contract_bound))
        subject = None if on_ranks else function_subject(name, function, framework, import_lines, function_name,
                                                         subject_spec)
    except CallShapeError as error:
        raise CallShapeError(f"fn: {error}") from None
    adapter = available_adapter(check_modes()[framework][0]) if subject is None else subject.adapter
    differentiable = adapter.differentiable if subject is None else subject.has_gradients
    if gradients and not differentiable:
        raise ValueError(f"gradients=True needs autograd, and {framework} has none")
    gradients = gradients_checked(gradients, differentiable)
    if reason := no_dtype_held(framework, dtypes, adapter.dtypes if subject is None else subject.supported_dtypes):
        raise ValueError(f"dtypes: {reason}")
    if gradient_examples is None:
        gradient_examples = default_gradient_examples(max_examples, split=accumulation or on_ranks)
    if accumulation or sharded:
        from fuzz.engines.plan import plan_sharded_cells

        engine = sharded or (RANKS_ENGINES[framework] if ranks else "accumulation")
        named = subject_spec if spec is None else replace(subject_spec, name=spec, binding=binding)
        tasks = plan_sharded_cells(named, engine, list(dtypes), devices, max_examples, seed, gradients,
                                   gradient_examples)
    else:
        tasks = plan_cells([(subject_spec, adapter.devices())], list(dtypes), devices, max_examples, seed,
                           gradients, gradient_examples)
    if not tasks:
        raise ValueError(f"none of the devices {list(devices or [])} exists for {framework} here "
                         f"(its devices here: {adapter.devices()})")
    if spec is not None and workers:
        from fuzz.run.workers import run_cells

        tasks = [replace(task, subject=replace(subject_spec, name=spec, binding=binding)) for task in tasks]
        return Report(tuple(run_cells(tasks, jobs=workers or 1, fail_fast=fail_fast, timeout=timeout)),
                      tuple(dtypes))
    results: list[CellResult] = []
    with ThreadWatcher(timeout) as watcher:
        for task in tasks:
            if task.engine is None:
                results.append(fuzz_task(subject, task, watcher))
            else:
                from fuzz.engines.cell import run_sharded_cell

                results.append(run_sharded_cell(task, watcher, subject=None if on_ranks else subject))
            if fail_fast and not results[-1].ok:
                break
    return Report(tuple(results), tuple(dtypes))


def _names(argument: str, values: Sequence[str] | str, choices: Sequence[str] | None) -> list[str]:
    """A list of names, each once: a sequence, or one comma-separated string as on the command line."""
    if isinstance(values, str):
        values = values.split(",")
    if not isinstance(values, Sequence) or not all(isinstance(value, str) for value in values):
        raise TypeError(f"{argument} must be a list of names (or one comma-separated string), got {values!r}")
    names = list(dict.fromkeys(value.strip() for value in values if value.strip()))
    unknown = [name for name in names if choices is not None and name not in choices]
    if unknown or not names:
        raise ValueError(f"{argument} must be a non-empty subset of {tuple(choices or ())}, got {list(values)!r}")
    return names


def _positive(argument: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{argument} must be a positive int, got {value!r}")


def _check_masked_values(masked_values: str) -> None:
    if masked_values not in MASKED_VALUES:
        raise ValueError(f"masked_values must be one of {MASKED_VALUES}, got {masked_values!r}")


def _spec_of(fn: Callable[..., Any], argument: str) -> str:
    """"module:name" for a function another process (a worker, a rank) can import; ValueError naming `argument`
    (what asked for other processes) for one it cannot."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or module == "__main__" or not isinstance(qualname, str) or not qualname.isidentifier():
        what = (f"{module}.{qualname}" if module and isinstance(qualname, str) else
                f"functools.{display_name(fn)}" if isinstance(fn, functools.partial) else
                f"{type(fn).__name__} {display_name(fn)}")
        instead = ("pass workers=None to run it in this process, or" if argument == "workers=" else
                   "define it in a module of its own (a function there that calls yours with the arguments a "
                   "partial or a lambda binds) and pass it from there, or pass")
        raise ValueError(f"{argument} needs a function importable by its module and name, and {what} is not (a "
                         "lambda, a partial, a callable instance, or a function defined in __main__ or inside "
                         f"another function): {instead} a 'package.module:function' string")
    return f"{module}:{qualname}"


def _adapter(framework: str) -> Any:
    """The adapter of a framework (torch, jax, numpy, ...) or of a check mode (torch-compile)."""
    modes = check_modes()
    if framework not in modes and framework not in {name for name, _ in modes.values()}:
        raise ValueError(f"framework must be one of {tuple(modes)}, got {framework!r}")
    return load_framework(modes[framework][0] if framework in modes else framework)


def cases(
    dtypes: Sequence[str] = ("float32",),
    layouts: Sequence[str] = ("contiguous",),
    devices: Sequence[str] = ("cpu",),
    contract: Contract | None = None,
    masked_values: str = "any",
    *,
    reduction: str | None = None,
    rows: str | None = None,
    l_max: float | None = None,
    accumulation: bool = False,
    dp_reduce: str | None = None,
    backward_scale: str | None = None,
) -> SearchStrategy[Case]:
    """The Hypothesis strategy of the suite's Cases (labelled draws, kept in Case.story) for the contract that
    `check` would declare from the same keywords (`reduction="seq-mean-token-mean", rows=..., l_max=...`; none:
    the magnitude diagnostic), or for `contract`, a Contract from `reference.contracts.get_contract`. Raises
    ValueError naming a declared parameter that is wrong or needs another."""
    from fuzz.judge.draws import cases as draw_cases

    declared = (reduction, rows, l_max, accumulation or None, dp_reduce, backward_scale)
    if contract is not None and any(value is not None for value in declared):
        raise ValueError("contract is a contract already bound: give it, or reduction=... and the other declared "
                         "parameters, not both")
    if contract is None:
        name, parameters = declared_contract(reduction, rows, l_max, accumulation, dp_reduce, backward_scale)
        contract = get_contract(name, parameters)
    _check_masked_values(masked_values)
    return draw_cases(dtypes=list(_names("dtypes", dtypes, DTYPE_NAMES)), layouts=list(layouts),
                      devices=list(devices), contract=contract, masked_values=masked_values)


def as_arrays(case: Case, framework: str) -> tuple[Any, ...]:
    """The inputs of `case`, in its contract's order, as native arrays of `framework` (torch, jax,
    numpy, ...), in its dtype, on its device, in its layout (NaN / True in the gaps a strided layout skips).
    A float64 case in JAX needs x64 enabled to be used (`jax.enable_x64(True)`)."""
    return _adapter(framework).materialize(case)


def check_case(fn: Callable[..., Any], case: Case, framework: str, precision: str = CONTRACT.name) -> list[str]:
    """What is wrong with fn's answer on `case` (empty when it conforms): output types, dtypes, devices,
    shapes, finiteness, unchanged inputs, and values within the suite's tolerance model."""
    from fuzz.judge.forward import check_forward

    adapter = _adapter(framework)
    with adapter.scope(case):
        return [str(failure) for failure in check_forward(fn, adapter, case, PRECISIONS[precision]).failures]
