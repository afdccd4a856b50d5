"""Command line: `python -m fuzz` (the conformance campaign over the built-ins) and
`python -m fuzz check TARGET --framework ...` (anyone's implementation)."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence

from fuzz.campaign import CellResult
from fuzz.cells import FRAMEWORK_CHOICES, CellTask, SubjectSpec, build_subject, plan_cells
from fuzz.loader import LoadError
from fuzz.parallel import default_jobs, run_cells
from fuzz.report import render_failures, render_matrix, write_json
from impls.dtypes import DTYPE_NAMES
from impls.registry import BUILTIN_NAMES, SHARDED_NAMES, get_implementation

INTERNAL_ERROR = 3
NO_STRIDES_NOTE = "strided layouts n/a: JAX arrays have no strides"


def _csv(choices: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        values = [value.strip() for value in text.split(",") if value.strip()]
        unknown = [value for value in values if value not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"{what} must be a comma-separated subset of {', '.join(choices)}")
        return values

    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")  # argparse names the option
    return value


def _common_options(parser: argparse.ArgumentParser, default_examples: int) -> None:
    jobs = default_jobs()
    parser.add_argument("--dtypes", type=_csv(DTYPE_NAMES, "--dtypes"), default=list(DTYPE_NAMES),
                        help="comma-separated dtypes (default: all four)")
    parser.add_argument("--devices", type=_csv(("cpu", "cuda"), "--devices"), default=None,
                        help="comma-separated devices (default: every device the framework sees)")
    parser.add_argument("--max-examples", type=_positive_int, default=default_examples,
                        help=f"Hypothesis examples per (device, dtype) cell (default {default_examples})")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--gradient-examples", type=_positive_int, default=None,
                        help="examples per gradient cell (default: half of --max-examples)")
    parser.add_argument("--jobs", type=_positive_int, default=jobs,
                        help=f"worker processes, one cell each at a time (default: min(2, cores) = {jobs})")


def campaign_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fuzz",
        description="Fuzz every available built-in implementation against the float64 reference and print a "
        "conformance matrix. Exit 0 only if everything conforms. Use `python -m fuzz check --help` to fuzz "
        "your own implementation.",
    )
    parser.add_argument("--implementations", type=_csv(BUILTIN_NAMES + SHARDED_NAMES, "--implementations"),
                        default=list(BUILTIN_NAMES + SHARDED_NAMES),
                        help="comma-separated built-ins (default: all available)")
    _common_options(parser, default_examples=40)
    parser.add_argument("--no-gradients", dest="gradients", action="store_false",
                        help="skip the gradient checks of the differentiable built-ins")
    return parser


def check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fuzz check",
        description="Fuzz one implementation with the contract's signature against the float64 reference. "
        "Exit 0: conforms; 1: counterexample found (printed as a runnable snippet); 2: usage or load error; "
        "3: the fuzzer itself failed.",
    )
    parser.add_argument("target", metavar="TARGET", help="package.module:function or path/to/file.py:function")
    parser.add_argument("--framework", choices=FRAMEWORK_CHOICES,
                        help="the framework the function takes; torch-compile and jax wrap it in "
                        "torch.compile(fullgraph=True, dynamic=True) / jax.jit")
    parser.add_argument("--sharded", choices=("torch", "jax"),
                        help="TARGET is a per-rank function (README, 'Sharded'): run it on torch.distributed "
                        "ranks (gloo; NCCL on CUDA) or under jax.shard_map, on every mesh (instead of --framework)")
    _common_options(parser, default_examples=40)
    parser.add_argument("--gradients", action="store_true",
                        help="also fuzz the backward pass (torch autograd / jax.vjp) against the exact VJP")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first failing cell to finish instead of filling the whole matrix")
    return parser


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
    subjects, notes, skipped, compiled = [], {}, {}, set()
    sharded = []
    for name in args.implementations:
        try:
            impl = get_implementation(name)
        except RuntimeError as error:
            skipped[name] = str(error)
            continue
        if impl.sharded:  # per-rank functions: fuzz/sharded/ runs their rows, after the others
            sharded.append(name)
            continue
        subjects.append((SubjectSpec(name), impl.devices))
        if impl.compiled:
            compiled.add(name)
        if impl.adapter.layouts == ("contiguous",):
            notes[name] = NO_STRIDES_NOTE
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=sys.stderr)
    print(f"Fuzzing {len(subjects)} implementation(s), {args.max_examples} examples per cell, seed {args.seed}, "
          f"{args.jobs} worker(s)", file=sys.stderr)
    tasks = plan_cells(subjects, args.dtypes, args.devices, args.max_examples, args.seed, args.gradients,
                       _gradient_examples(args))
    results = run_cells(tasks, jobs=args.jobs, priority=lambda task: task.subject.name in compiled)
    if sharded:
        from fuzz.sharded.command import campaign_cells

        results += campaign_cells(sharded, args)
    elapsed = time.perf_counter() - started
    print(f"\nConformance matrix ({elapsed:.0f} s)")
    return _finish(results, args, notes, {"command": "campaign", "seconds": elapsed, "skipped": skipped,
                                          "seed": args.seed, "max_examples": args.max_examples})


def check_tasks(args: argparse.Namespace) -> list[CellTask]:
    """The cells of one `check`: every device of the framework (or --devices), every dtype asked for.
    Raises LoadError when the target does not load."""
    spec = SubjectSpec(args.target, args.framework)
    devices = build_subject(spec).adapter.devices()
    return plan_cells([(spec, devices)], args.dtypes, args.devices, args.max_examples, args.seed,
                      args.gradients, _gradient_examples(args))


def run_check(args: argparse.Namespace) -> list[CellResult]:
    """Run a parsed `check` command's cells; raises LoadError when the target does not load."""
    return run_cells(check_tasks(args), jobs=args.jobs, fail_fast=args.fail_fast)


def check(argv: Sequence[str]) -> int:
    parser = check_parser()
    args = parser.parse_args(argv)
    if (args.framework is None) == (args.sharded is None):
        parser.error("give exactly one of --framework and --sharded")  # exits 2
    if args.sharded:
        from fuzz.sharded.command import sharded_check

        explicit = any(arg.startswith("--max-examples") for arg in argv)  # else the sharded default
        return sharded_check(args, default_examples=not explicit)
    try:  # load here first for a clear exit 2 before any work; a worker process may still fail to load it
        adapter = build_subject(SubjectSpec(args.target, args.framework)).adapter
        if args.gradients and not adapter.differentiable:
            print(f"error: --gradients needs autograd, and {args.framework} has none", file=sys.stderr)
            return 2
        started = time.perf_counter()
        results = run_check(args)
    except LoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    print(f"\n{args.target} ({args.framework}), {elapsed:.0f} s")
    notes = {args.target: NO_STRIDES_NOTE} if adapter.layouts == ("contiguous",) else {}
    return _finish(results, args, notes, {"command": "check", "target": args.target,
                                          "framework": args.framework, "seconds": elapsed, "seed": args.seed})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return check(argv[1:]) if argv and argv[0] == "check" else campaign(argv)
    except Exception:  # the harness's own failure: never to be read as a verdict on the implementation
        traceback.print_exc()
        print("internal error: the fuzzer itself failed (exit 3), which says nothing about the implementation; "
              "please report it with the traceback above", file=sys.stderr)
        return INTERNAL_ERROR
