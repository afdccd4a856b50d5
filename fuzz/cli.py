"""Command line: `python -m fuzz` (the conformance campaign over the built-ins) and
`python -m fuzz check TARGET --framework ...` (anyone's implementation)."""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fuzz.campaign import CellResult, Subject, fuzz_cell
from fuzz.gradients import gradient_example
from fuzz.loader import LoadError, load_target
from fuzz.report import render_failures, render_matrix, write_json
from impls.dtypes import DTYPE_NAMES
from impls.registry import BUILTIN_NAMES, Implementation, get_implementation

FRAMEWORK_CHOICES = ("torch", "torch-compile", "jax", "numpy")
NO_STRIDES_NOTE = "strided layouts n/a: JAX arrays have no strides"


def _csv(choices: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        values = [value.strip() for value in text.split(",") if value.strip()]
        unknown = [value for value in values if value not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"{what} must be a comma-separated subset of {', '.join(choices)}")
        return values

    return parse


def _common_options(parser: argparse.ArgumentParser, default_examples: int) -> None:
    parser.add_argument("--dtypes", type=_csv(DTYPE_NAMES, "--dtypes"), default=list(DTYPE_NAMES),
                        help="comma-separated dtypes (default: all four)")
    parser.add_argument("--devices", type=_csv(("cpu", "cuda"), "--devices"), default=None,
                        help="comma-separated devices (default: every device the framework sees)")
    parser.add_argument("--max-examples", type=int, default=default_examples,
                        help=f"Hypothesis examples per (device, dtype) cell (default {default_examples})")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--gradient-examples", type=int, default=None,
                        help="examples per gradient cell (default: half of --max-examples)")


def campaign_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fuzz",
        description="Fuzz every available built-in implementation against the float64 reference and print a "
        "conformance matrix. Exit 0 only if everything conforms. Use `python -m fuzz check --help` to fuzz "
        "your own implementation.",
    )
    parser.add_argument("--implementations", type=_csv(BUILTIN_NAMES, "--implementations"),
                        default=list(BUILTIN_NAMES), help="comma-separated built-ins (default: all available)")
    _common_options(parser, default_examples=40)
    parser.add_argument("--no-gradients", dest="gradients", action="store_false",
                        help="skip the gradient checks of the differentiable built-ins")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes, one cell each at a time (default: min(2, cores))")
    return parser


def check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fuzz check",
        description="Fuzz one implementation with the contract's signature against the float64 reference. "
        "Exit 0: conforms; 1: counterexample found (printed as a runnable snippet); 2: usage or load error.",
    )
    parser.add_argument("target", metavar="TARGET", help="package.module:function or path/to/file.py:function")
    parser.add_argument("--framework", required=True, choices=FRAMEWORK_CHOICES,
                        help="the framework the function takes; torch-compile and jax wrap it in "
                        "torch.compile(fullgraph=True, dynamic=True) / jax.jit")
    _common_options(parser, default_examples=40)
    parser.add_argument("--gradients", action="store_true",
                        help="also fuzz the backward pass (torch autograd / jax.vjp) against the exact VJP")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first failing cell instead of filling the whole matrix")
    return parser


def subject_for(implementation: Implementation) -> Subject:
    """A built-in implementation as a fuzzing subject (its snippet imports it from this checkout)."""
    function = implementation.function
    return Subject(implementation.name, function, implementation.adapter,
                   (f"from {function.__module__} import {function.__name__}",), function.__name__)


@dataclass(frozen=True)
class CellTask:
    """One cell of a campaign, small enough to send to a worker process."""

    implementation: str
    device: str
    dtype: str
    check: str  # "forward" or "gradients"
    examples: int
    seed: int


def _plan(subjects: Sequence[tuple[Subject, Sequence[str]]], dtypes: Sequence[str],
          devices: Sequence[str] | None, max_examples: int, seed: int, gradients: bool,
          gradient_examples: int) -> list[CellTask]:
    checks = [("forward", max_examples)] + ([("gradients", gradient_examples)] if gradients else [])
    return [
        CellTask(subject.name, device, dtype, check, examples, seed)
        for subject, subject_devices in subjects
        for device in subject_devices if devices is None or device in devices
        for check, examples in checks
        for dtype in dtypes
    ]


def _run_task(subject: Subject, task: CellTask) -> CellResult:
    if task.check == "gradients" and not subject.adapter.differentiable:
        return CellResult(subject.name, task.device, task.dtype, task.check, applicable=False)
    cell = fuzz_cell(subject, dtype=task.dtype, device=task.device, layouts=subject.adapter.layouts,
                     max_examples=task.examples, seed=task.seed, check=task.check,
                     example_check=gradient_example if task.check == "gradients" else None)
    status = "ok" if cell.ok else "FAIL"
    print(f"  {task.check} of {subject.name} on {task.device} in {task.dtype}: {status}, {cell.examples} examples, "
          f"worst err/tol {cell.worst:.3g}, {cell.seconds:.1f} s", file=sys.stderr, flush=True)
    return cell


def run_builtin_task(task: CellTask) -> CellResult:
    """Run one built-in's cell (in a worker process: the registry loads the framework there)."""
    return _run_task(subject_for(get_implementation(task.implementation)), task)


def run_cells(subjects: Sequence[tuple[Subject, Sequence[str]]], dtypes: Sequence[str],
              devices: Sequence[str] | None, max_examples: int, seed: int, gradients: bool,
              gradient_examples: int) -> list[CellResult]:
    """Fuzz every (subject, device, dtype) cell in this process, forward then (if asked) gradients."""
    by_name = {subject.name: subject for subject, _ in subjects}
    tasks = _plan(subjects, dtypes, devices, max_examples, seed, gradients, gradient_examples)
    return [_run_task(by_name[task.implementation], task) for task in tasks]


def run_builtin_cells_in_parallel(tasks: Sequence[CellTask], jobs: int) -> list[CellResult]:
    """Cells of built-ins over `jobs` worker processes, the costliest (compiling) ones first."""
    compiling_first = sorted(range(len(tasks)),
                             key=lambda i: get_implementation(tasks[i].implementation).compiled, reverse=True)
    context = multiprocessing.get_context("spawn")  # no fork after torch or JAX started threads
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {i: pool.submit(run_builtin_task, tasks[i]) for i in compiling_first}
        return [futures[i].result() for i in range(len(tasks))]


def _gradient_examples(args: argparse.Namespace) -> int:
    return args.gradient_examples if args.gradient_examples is not None else max(1, args.max_examples // 2)


def _finish(results: list[CellResult], args: argparse.Namespace, notes: dict[str, str], meta: dict) -> int:
    print(render_matrix(results, args.dtypes, notes))
    print(render_failures(results))
    if args.json:
        write_json(args.json, results, meta)
        print(f"JSON report: {args.json}")
    if not results:
        print("nothing was fuzzed: no implementation and device matched", file=sys.stderr)
        return 2
    return 0 if all(cell.ok for cell in results) else 1


def campaign(argv: Sequence[str]) -> int:
    args = campaign_parser().parse_args(argv)
    started = time.perf_counter()
    subjects, notes, skipped = [], {}, {}
    for name in args.implementations:
        try:
            impl = get_implementation(name)
        except RuntimeError as error:
            skipped[name] = str(error)
            continue
        subjects.append((subject_for(impl), impl.devices))
        if impl.adapter.layouts == ("contiguous",):
            notes[name] = NO_STRIDES_NOTE
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=sys.stderr)
    print(f"Fuzzing {len(subjects)} implementation(s), {args.max_examples} examples per cell, seed {args.seed}, "
          f"{args.jobs} worker(s)", file=sys.stderr)
    tasks = _plan(subjects, args.dtypes, args.devices, args.max_examples, args.seed, args.gradients,
                  _gradient_examples(args))
    if args.jobs > 1:
        results = run_builtin_cells_in_parallel(tasks, args.jobs)
    else:
        by_name = {subject.name: subject for subject, _ in subjects}
        results = [_run_task(by_name[task.implementation], task) for task in tasks]
    elapsed = time.perf_counter() - started
    print(f"\nConformance matrix ({elapsed:.0f} s)")
    return _finish(results, args, notes, {"command": "campaign", "seconds": elapsed, "skipped": skipped,
                                          "seed": args.seed, "max_examples": args.max_examples})


def check_subject(target_spec: str, framework: str) -> Subject:
    """The user's function as a fuzzing subject; raises LoadError for anything that stops it loading."""
    target = load_target(target_spec)
    from impls.frameworks import load_framework

    adapter_name = {"torch-compile": "torch"}.get(framework, framework)
    try:
        adapter = load_framework(adapter_name)
    except Exception as error:
        raise LoadError(f"framework {adapter_name} is unavailable here: {type(error).__name__}: {error}") from error
    wrap = {"torch-compile": "torch.compile", "jax": "jax.jit"}.get(framework)
    function = adapter.compile(target.function) if wrap else target.function
    return Subject(target_spec, function, adapter, target.import_lines, target.function_name, wrap=wrap)


def run_check(args: argparse.Namespace, subject: Subject) -> list[CellResult]:
    """The cells of one `check`: every device of the framework (or --devices), every dtype asked for."""
    tasks = _plan([(subject, subject.adapter.devices())], args.dtypes, args.devices, args.max_examples,
                  args.seed, args.gradients, _gradient_examples(args))
    results = []
    for task in tasks:
        results.append(_run_task(subject, task))
        if args.fail_fast and not results[-1].ok:
            break
    return results


def check(argv: Sequence[str]) -> int:
    args = check_parser().parse_args(argv)
    try:
        subject = check_subject(args.target, args.framework)
    except LoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    adapter = subject.adapter
    if args.gradients and not adapter.differentiable:
        print(f"error: --gradients needs autograd, and {args.framework} has none", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = run_check(args, subject)
    elapsed = time.perf_counter() - started
    print(f"\n{args.target} ({args.framework}), {elapsed:.0f} s")
    notes = {args.target: NO_STRIDES_NOTE} if adapter.layouts == ("contiguous",) else {}
    return _finish(results, args, notes, {"command": "check", "target": args.target,
                                          "framework": args.framework, "seconds": elapsed, "seed": args.seed})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        return check(argv[1:])
    return campaign(argv)
