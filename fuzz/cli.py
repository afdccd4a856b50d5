"""Command line: `python -m fuzz` (the conformance campaign over the built-ins) and
`python -m fuzz check TARGET --framework ...` (anyone's implementation)."""

from __future__ import annotations

import argparse
import difflib
import shlex
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from fuzz.engines.plan import DEFAULT_EXAMPLES as SHARDED_EXAMPLES
from fuzz.engines.plan import plan_sharded_cells
from fuzz.engines.registry import CHOICES as SHARDED_CHOICES
from fuzz.engines.registry import RANKS_ENGINES, engine_call, engine_named, rank_call
from fuzz.engines.torch_ranks import DEFAULT_TIMEOUT_S, TIMEOUT_VARIABLE
from fuzz.loader import LoadError, check_call_shape, load_target
from fuzz.report.closed_stdout import tolerate_a_closed_stdout
from fuzz.report.data import report_data
from fuzz.report.files import clashing_reports, unwritable_reason, write_json
from fuzz.report.html import write_html
from fuzz.report.matrix import render_matrix
from fuzz.report.results import CellResult
from fuzz.report.terminal import bugs, joined, summary, wrap
from fuzz.run.calls import DEFAULT_TIMEOUT
from fuzz.run.plan import CellTask, default_gradient_examples, gradients_checked, no_dtype_held, plan_cells
from fuzz.run.processes import exit_without_teardown
from fuzz.run.subjects import (
    FRAMEWORK_CHOICES,
    MASKED_VALUES,
    SubjectSpec,
    available_adapter,
    build_subject,
    declared_contract,
    implied_parameters,
    unread_parameters,
)
from fuzz.run.workers import Workers, default_jobs, mode_imports, run_cells
from fuzz.version import VERSION
from impls.frameworks import prepare_process
from impls.registry import builtin_imports, builtin_names, get_implementation
from reference.contracts import CONTRACT_NAMES, get_contract
from reference.dtypes import DTYPE_NAMES
from reference.tolerance import CONTRACT, PRECISIONS

# every built-in of every contract, single-process and per-rank, each name once
ALL_BUILTINS = tuple(dict.fromkeys(name for contract in CONTRACT_NAMES for sharded in (False, True)
                                   for name in builtin_names(contract, sharded)))
COUNTEREXAMPLE = 1
USAGE_ERROR = 2
INTERNAL_ERROR = 3
INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended


def _csv(choices: Sequence[str]):
    """An argparse type for a comma-separated selection: argparse names the option, the error the values."""
    def parse(text: str) -> list[str]:
        values = list(dict.fromkeys(value.strip() for value in text.split(",") if value.strip()))  # once each
        unknown = [value for value in values if value not in choices]
        if unknown or not values:
            given = f"unknown {', '.join(map(repr, unknown))}" if unknown else "nothing given"
            raise argparse.ArgumentTypeError(f"{given}; choose a comma-separated subset of {', '.join(choices)}")
        return values

    return parse


def _report_path(text: str) -> str:
    """A path a report can be written to, checked when the command line is read: before any fuzzing."""
    reason = unwritable_reason(text)
    if reason is not None:
        raise argparse.ArgumentTypeError(f"cannot write the report there: {reason}")
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")  # argparse names the option
    return value


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _common_options(parser: argparse.ArgumentParser, examples_help: str, gradient_examples_help: str,
                    on_ranks: str) -> None:
    jobs = default_jobs()
    parser.add_argument("--dtypes", type=_csv(DTYPE_NAMES), default=list(DTYPE_NAMES),
                        help="comma-separated dtypes (default: all four; those a framework lacks are n/a cells)")
    parser.add_argument("--devices", type=_csv(("cpu", "cpu:1", "cuda")), default=None,
                        help="comma-separated devices (default: every device the framework sees)")
    parser.add_argument("--max-examples", type=_positive_int, default=DEFAULT_EXAMPLES, help=examples_help)
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--json", metavar="PATH", type=_report_path,
                        help="write the full report as JSON (checked before fuzzing: the folder must exist)")
    parser.add_argument("--html", metavar="PATH", type=_report_path,
                        help="write the report as one self-contained HTML page: the matrix as a heatmap, every "
                        "bug with its snippet (checked before fuzzing, as --json)")
    parser.add_argument("--matrix", action="store_true",
                        help="print the whole conformance matrix (every dtype and layout, wide), not only the "
                        "summary of one line per implementation and contract")
    parser.add_argument("--gradient-examples", type=_positive_int, default=None, help=gradient_examples_help)
    parser.add_argument("--jobs", type=_positive_int, default=jobs,
                        help=f"worker processes, one cell each at a time (default: min(2, cores) = {jobs})")
    parser.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="time limit of one call of the function, a first compile included; a call that "
                        f"overruns fails its cell (default {DEFAULT_TIMEOUT:g}). {on_ranks} an example's deadline "
                        f"is ${TIMEOUT_VARIABLE} seconds instead (default {DEFAULT_TIMEOUT_S:g})")


CAMPAIGN_HELP = ("Fuzz every available built-in implementation of every contract against the float64 reference "
                 "and print a summary (one line per implementation and contract) and every bug found. Exit 0 "
                 "only if everything conforms.")
CHECK_HELP = ("Fuzz one implementation with the contract's signature against the float64 reference. "
              "Exit 0: conforms; 1: counterexample found (printed as a runnable snippet); 2: usage or load error; "
              "3: the fuzzer itself failed; 130: interrupted (Ctrl-C).")
SUBCOMMANDS = ("campaign", "check")
DEFAULT_EXAMPLES = 40


def _add_campaign(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("campaign", help="(the default) fuzz every built-in implementation",
                                   description=CAMPAIGN_HELP)
    parser.add_argument("--implementations", type=_csv(ALL_BUILTINS),
                        default=list(ALL_BUILTINS), help="comma-separated built-ins (default: all available)")
    parser.add_argument("--contracts", type=_csv(CONTRACT_NAMES), default=list(CONTRACT_NAMES),
                        help=f"comma-separated contracts whose built-ins are fuzzed (default: all: "
                        f"{', '.join(CONTRACT_NAMES)})")
    _common_options(parser, f"Hypothesis examples per (device, dtype) cell (default {DEFAULT_EXAMPLES}; a cell of a "
                    "sharded or micro-batch row runs at most its engine's own number: each example runs every split), "
                    "drawn besides a few fixed cases (docs/fuzzer.md)",
                    "examples per gradient cell (default: half of --max-examples; a sharded or micro-batch row's: "
                    "as many as its forward cells), drawn after its 2 fixed cases",
                    "For the sharded built-ins and the rows over ranks (torch-distributed, jax-shard-map, R x G)")
    parser.add_argument("--no-gradients", dest="gradients", action="store_false",
                        help="skip the gradient checks of the differentiable built-ins")
    parser.set_defaults(run=campaign)


def _add_check(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check", help="fuzz your own implementation (TARGET)", description=CHECK_HELP)
    parser.add_argument("target", metavar="TARGET", help="package.module:function or path/to/file.py:function (a "
                        "torch.autograd.Function: FILE:YourFunction.apply)")
    runs = parser.add_mutually_exclusive_group(required=True)
    # metavars name the choices in the help text: argparse cannot wrap the usage line of a group that lists them
    runs.add_argument("--framework", choices=FRAMEWORK_CHOICES, metavar="FRAMEWORK",
                      help=f"the framework the function takes ({', '.join(FRAMEWORK_CHOICES)}); torch-compile and "
                      "jax run it compiled: "
                      "torch.compile(f, fullgraph=True, dynamic=True) / jax.jit(f) (jax calls a per-chunk function "
                      "of --accumulation as it is, its keywords Python ints; torch-compile compiles it too)")
    runs.add_argument("--sharded", choices=SHARDED_CHOICES, metavar="ENGINE",
                      help=f"({' or '.join(SHARDED_CHOICES)}) TARGET is a per-rank function (docs/sharded.md), of "
                      "the magnitude diagnostic or, with --reduction, of the loss reduction: run it on "
                      "torch.distributed ranks (gloo; NCCL on CUDA) or under jax.shard_map, on every mesh "
                      "(instead of --framework)")
    _common_options(parser, f"Hypothesis examples per cell (default {DEFAULT_EXAMPLES}; with --accumulation "
                    f"{ACCUMULATION_EXAMPLES} per split cell, with --ranks {RANKS_EXAMPLES}, with --sharded "
                    f"{SHARDED_EXAMPLES}: each example runs every split or mesh), drawn besides a few fixed cases "
                    "(docs/fuzzer.md)",
                    "examples per gradient cell (default: half of --max-examples; with --sharded or --accumulation "
                    "as many), drawn after its 2 fixed cases", "On ranks or a mesh (--ranks, --sharded)")
    parser.set_defaults(max_examples=None)  # None: DEFAULT_EXAMPLES, or --sharded's own default
    parser.add_argument("--gradients", action=argparse.BooleanOptionalAction, default=None,
                        help="fuzz the backward pass too (torch autograd / jax.vjp) against the exact VJP (default: "
                        "wherever the framework differentiates: torch, torch-compile, jax); --no-gradients: the "
                        "forward only")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default=CONTRACT.name,
                        help="contract (default): sums in at least float32, elementwise steps may round in the "
                        "input dtype a counted number of times; strict: the built-ins' promise, round once to "
                        "the output dtype (docs/tolerance.md)")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first failing cell to finish instead of filling the whole matrix")
    magnitude, reduction, accumulation = (get_contract(name) for name in CONTRACT_NAMES)
    declared = parser.add_argument_group(
        "the contract", f"what TARGET computes: by default the {magnitude.title}, {magnitude.signature}; with "
        f"--reduction, {reduction.title}, {reduction.signature} (docs/contracts.md)")
    declared.add_argument("--reduction", metavar="MODE",
                          help=f"the mode TARGET implements: {reduction.parameter('mode').spellings()} (whose "
                          "spelling each alias is: docs/contracts.md)")
    declared.add_argument("--rows", choices=("all", "nonempty"),
                          help="what D counts in the seq-* modes: every row (the default, the book's 1/B) or the "
                          "rows with a selected token (the default for tunix's sequence-mean-token-mean)")
    declared.add_argument("--l-max", type=_positive_number, metavar="L",
                          help="L_max of seq-mean-token-sum-norm (fixed-length), a positive constant")
    declared.add_argument("--accumulation", action="store_true",
                          help="TARGET is the per-chunk loss of a step split over ranks and micro-batches, "
                          f"{accumulation.signature}: the combination of its chunks must equal the full-batch "
                          "--reduction (docs/contracts.md)")
    declared.add_argument("--ranks", action="store_true",
                          help="with --accumulation: on data-parallel ranks, TARGET computing the step's "
                          "normalizers itself with collectives: --framework torch, real torch.distributed ranks "
                          f"(gloo) under DDP, {rank_call('torch', accumulation)[1]}; --framework jax, "
                          f"jax.shard_map over host CPU devices, {rank_call('jax', accumulation)[1]}")
    declared.add_argument("--dp-reduce", choices=("mean", "sum"),
                          help="with --accumulation: the ranks' gradients are averaged (default: DDP, FSDP) or summed")
    declared.add_argument("--backward-scale", choices=("1", "1/G"),
                          help="with --accumulation: each chunk's backward is scaled by 1 (default) or 1/G "
                          "(DeepSpeed, the HF Trainer)")
    declared.add_argument("--masked-values", choices=MASKED_VALUES, default="any",
                          help="any (default): masked positions hold anything, -inf and NaN included; finite: "
                          "TARGET's padding is finite by construction (the verdict holds under that assumption)")
    parser.set_defaults(run=check)


def build_parser(prog: str = "python -m fuzz") -> argparse.ArgumentParser:
    """The command line: subcommands `campaign` (the default when none is named) and `check`."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Differential testing of RL-for-LLM loss normalization (the magnitude diagnostic, the loss "
        "reductions, their micro-batch and rank forms) against an exact float64 reference. Without a subcommand, "
        "runs `campaign` (its options may follow directly). Exit 0: "
        f"conforms; {COUNTEREXAMPLE}: a counterexample; 2: usage or load error; {INTERNAL_ERROR}: the fuzzer "
        f"itself failed; {INTERRUPTED}: interrupted (Ctrl-C).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}",
                        help="show the suite's version and exit")
    subparsers = parser.add_subparsers(title="subcommands", dest="command", metavar="{campaign,check}")
    _add_campaign(subparsers)
    _add_check(subparsers)
    return parser


def parse(argv: Sequence[str], prog: str = "python -m fuzz") -> argparse.Namespace:
    """Parse a command line. One that names no subcommand is the campaign's (`make fuzz ARGS=...`): argparse
    has no default subcommand, so it is named here, before argparse sees the arguments."""
    argv = list(argv)
    parser = build_parser(prog)
    if "--version" in argv:  # anywhere, as in `python -m fuzz check --version`: only the top parser has it
        argv = ["--version"]
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):  # the campaign takes no positional
        near = difflib.get_close_matches(argv[0], SUBCOMMANDS, n=1)
        parser.error(f"unknown subcommand {argv[0]!r}" + (f" (did you mean {near[0]}?)" if near else "")
                     + f": choose from {', '.join(SUBCOMMANDS)}, or name none for the campaign")
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["campaign", *argv]
    args = parser.parse_args(argv)
    if clash := clashing_reports({"--json": getattr(args, "json", None), "--html": getattr(args, "html", None)}):
        parser.error(clash)
    return args


def check_parser() -> argparse.ArgumentParser:
    """The `check` subcommand's parser (tests build check runs from it)."""
    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return subparsers.choices["check"]


def _gradient_examples(args: argparse.Namespace) -> int:
    if args.max_examples is None:
        args.max_examples = DEFAULT_EXAMPLES
    return args.gradient_examples if args.gradient_examples is not None else default_gradient_examples(
        args.max_examples, split=False)


def _split_gradient_examples(args: argparse.Namespace) -> int:
    return args.gradient_examples if args.gradient_examples is not None else default_gradient_examples(
        args.max_examples, split=True)


def _finish(results: list[CellResult], args: argparse.Namespace, notes: dict[str, str], meta: dict) -> int:
    if not results:  # the plans refuse this earlier, with the reason; this is the last guard
        print("error: nothing was fuzzed: no implementation and device matched", file=sys.stderr)
        return USAGE_ERROR
    if args.matrix:
        print(render_matrix(results, args.dtypes, notes))
    print(joined(summary(results)))
    print(joined(bugs(results)))
    verdict = 0 if all(cell.ok for cell in results) else COUNTEREXAMPLE
    typed = getattr(args, "command_line", None)  # set by main, absent where a caller parsed the arguments itself
    data = report_data(results, {**meta, **({"command_line": typed} if typed else {})})
    for path, what, write in ((args.json, "JSON", write_json), (args.html, "HTML", write_html)):
        if not path:
            continue
        try:
            write(path, data)
        except OSError as error:  # the folder changed since it was checked: the verdict above still stands
            print(f"error: the {what} report could not be written to {path}: {error}", file=sys.stderr)
            return verdict or USAGE_ERROR
        print(f"{what} report: {path}")
    return verdict


def no_matching_device(asked: Sequence[str], here: dict[str, Sequence[str]]) -> str:
    """Why nothing was planned for `--devices`: the devices asked for, and those each subject has here."""
    have = "; ".join(f"{name}: {', '.join(devices) or 'none'}" for name, devices in here.items())
    return f"none of the devices asked for ({', '.join(asked)}) exists here; the devices here are {have}"


# `check --accumulation` without --max-examples: examples per (R x G split, dtype) cell: five splits make it 100
# per dtype (gradients: half)
ACCUMULATION_EXAMPLES = 20
RANKS_EXAMPLES = 10  # `check --accumulation --ranks`: as `check --sharded`, the ranks' round trips cost


def _cost(task: CellTask, compiled: set[str]) -> int:
    """Which cells start first: compiling ones, then sharded ones (ranks to start), then the rest, so that no
    worker is left with a long cell at the end."""
    return 2 if task.subject.name in compiled and task.engine is None else int(task.engine is not None)


@dataclass
class CampaignPlan:
    """The campaign's cells, and what the report says about the built-ins."""

    tasks: list[CellTask] = field(default_factory=list)
    subjects: list[tuple[SubjectSpec, tuple[str, ...]]] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # why some layouts are n/a, per built-in
    skipped: dict[str, str] = field(default_factory=dict)  # built-ins that cannot run here, and why
    compiled: set[str] = field(default_factory=set)


def campaign_plan(args: argparse.Namespace) -> CampaignPlan:
    """Every cell of the campaign: each built-in asked for on every device it has, and a sharded row per mesh for
    the per-rank built-ins."""
    plan = CampaignPlan()
    gradient_examples = _gradient_examples(args)
    sharded = []
    for contract in args.contracts:
        for name in args.implementations:
            if name not in builtin_names(contract) + builtin_names(contract, sharded=True):
                continue
            try:
                impl = get_implementation(name, contract)
            except RuntimeError as error:
                plan.skipped[name] = str(error)
                continue
            spec = SubjectSpec(name, contract=contract)
            for engine in impl.engines:  # a row per mesh, or per (ranks, micro-batches) split
                examples = min(args.max_examples, engine_named(engine).campaign_examples)
                sharded += plan_sharded_cells(spec, engine, args.dtypes, args.devices, examples, args.seed,
                                              args.gradients and engine_named(engine).gradients, examples)
            if impl.sharded:  # a per-rank function has sharded rows only
                continue
            plan.subjects.append((spec, impl.devices))
            if impl.compiled:
                plan.compiled.add(name)
            if impl.adapter.layouts_note:
                plan.notes[name] = impl.adapter.layouts_note
    plan.tasks = plan_cells(plan.subjects, args.dtypes, args.devices, args.max_examples, args.seed, args.gradients,
                            gradient_examples) + sharded
    return plan


def campaign(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    # The workers' server imports the built-ins' frameworks and modules while this process plans (it imports them too)
    workers = Workers(*builtin_imports(args.implementations, args.contracts))
    try:
        plan = campaign_plan(args)
        for name, reason in plan.skipped.items():
            print(joined(wrap(f"skipped {name}: {reason}")), file=sys.stderr)
        if not plan.tasks:
            here = {spec.name: devices for spec, devices in plan.subjects}
            reason = (no_matching_device(args.devices or [], here) if here
                      else "no implementation asked for is available here")
            print(f"error: {reason}", file=sys.stderr)
            return USAGE_ERROR
        print(joined(wrap(f"Fuzzing {len(plan.subjects)} implementation(s) in {len(plan.tasks)} cells, "
                          f"{args.max_examples} examples per cell, seed {args.seed}, {args.jobs} worker(s)")),
              file=sys.stderr)
        results = run_cells(plan.tasks, jobs=args.jobs, timeout=args.timeout,
                            priority=lambda task: _cost(task, plan.compiled), started=workers)
    finally:
        workers.close()
    elapsed = time.perf_counter() - started
    print(f"\nConformance summary ({elapsed:.0f} s)")
    return _finish(results, args, plan.notes, {"command": "campaign", "seconds": elapsed, "skipped": plan.skipped,
                                               "seed": args.seed, "max_examples": args.max_examples})


def check_spec(args: argparse.Namespace, framework: str) -> SubjectSpec:
    """The subject a parsed `check` names: TARGET, its framework, precision, contract and declared domain."""
    contract, parameters = declared_contract(args.reduction, args.rows, args.l_max, args.accumulation,
                                             args.dp_reduce, args.backward_scale)
    return SubjectSpec.of(args.target, framework, contract=contract, parameters=parameters, precision=args.precision,
                          masked_values=args.masked_values)


def check_tasks(args: argparse.Namespace) -> list[CellTask]:
    """The cells of one `check`: every device of the framework (or --devices), every dtype asked for; with
    --sharded, every mesh of the engine too. Raises LoadError when the target does not load."""
    if args.accumulation:  # the per-chunk loss, on every (R, G) split of the step: in this process, or on ranks
        engine = engine_named(RANKS_ENGINES[args.framework] if args.ranks else "accumulation")
        if args.max_examples is None:
            args.max_examples = RANKS_EXAMPLES if args.ranks else ACCUMULATION_EXAMPLES
        if args.ranks:
            available_adapter(engine.framework)
            load_target(args.target)
            spec = check_spec(args, engine.framework)
            differentiable = engine.gradients
        else:
            spec = check_spec(args, args.framework)
            differentiable = build_subject(spec).adapter.differentiable
        devices = engine.devices(spec)
        tasks = plan_sharded_cells(spec, engine.name, args.dtypes, args.devices, args.max_examples, args.seed,
                                   gradients_checked(args.gradients, differentiable), _split_gradient_examples(args))
    elif args.sharded:
        if args.max_examples is None:
            args.max_examples = SHARDED_EXAMPLES
        engine = engine_named(args.sharded)
        available_adapter(engine.framework)  # a clear LoadError before any rank starts
        load_target(args.target)
        spec = check_spec(args, engine.framework)
        tasks = plan_sharded_cells(spec, engine.name, args.dtypes, args.devices, args.max_examples, args.seed,
                                   gradients_checked(args.gradients, engine.gradients), _split_gradient_examples(args))
        devices = engine.devices(spec)
    else:
        spec = check_spec(args, args.framework)
        adapter = build_subject(spec).adapter
        devices = adapter.devices()
        gradient_examples = _gradient_examples(args)  # resolves the default --max-examples too
        tasks = plan_cells([(spec, devices)], args.dtypes, args.devices, args.max_examples, args.seed,
                           gradients_checked(args.gradients, adapter.differentiable), gradient_examples)
    if not tasks:
        raise LoadError(no_matching_device(args.devices or [], {args.sharded or args.framework: devices}))
    return tasks


def run_check(args: argparse.Namespace, started: Workers | None = None) -> list[CellResult]:
    """Run a parsed `check` command's cells (in `started` workers first); raises LoadError when the target does
    not load."""
    return run_cells(check_tasks(args), jobs=args.jobs, fail_fast=args.fail_fast, timeout=args.timeout,
                     started=started)


def option_spelling(name: str) -> str:
    """A declared parameter's option: l_max -> --l-max."""
    return "--" + name.replace("_", "-")


def check(args: argparse.Namespace) -> int:
    try:
        name, bound = declared_contract(args.reduction, args.rows, args.l_max, args.accumulation, args.dp_reduce,
                                        args.backward_scale, spell=option_spelling)
    except ValueError as error:  # a declared parameter that is wrong, or one that needs another (--l-max)
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    given = {"mode": args.reduction, "rows": args.rows, "l_max": args.l_max}
    for note in (*implied_parameters(name, given, bound, spell=option_spelling),
                 *unread_parameters(bound, args.rows, args.l_max, spell=option_spelling)):
        print(f"note: {note}", file=sys.stderr)
    if args.sharded and args.accumulation:  # two engines for one function: the per-chunk loss has its own ranks
        print(f"error: --sharded runs a per-rank function on a mesh; a per-micro-batch loss on data-parallel ranks "
              f"is --framework {args.sharded} --accumulation --ranks", file=sys.stderr)
        return USAGE_ERROR
    if args.ranks and (not args.accumulation or args.framework not in RANKS_ENGINES):
        print("error: --ranks runs a per-chunk loss on data-parallel ranks (torch.distributed under DDP, or "
              "jax.shard_map): it needs --accumulation and --framework torch or jax", file=sys.stderr)
        return USAGE_ERROR
    # The workers' server starts first: its imports of the function's frameworks (seconds with torch) overlap this
    # process's loading of the target; it forks no worker if the target does not load.
    # (argparse and the checks above leave a --framework choice, or an engine that has an adapter)
    engine = args.sharded or (RANKS_ENGINES[args.framework] if args.ranks else None)
    (framework,), modules = mode_imports(engine_named(engine).framework if engine else args.framework)
    workers = Workers((framework,), modules)
    try:  # load here first for a clear exit 2 before any work; a worker process may still fail to load it
        held = available_adapter(framework).dtypes  # a framework that is missing, before a target that imports it
        if args.ranks or args.sharded:  # the engine's ranks call it with keywords of their own
            contract = check_spec(args, args.framework or "").bound_contract
            check_call_shape(load_target(args.target).function, contract, args.target, engine_call(engine, contract))
        if not args.sharded and not args.ranks:
            adapter = build_subject(check_spec(args, args.framework)).adapter
            if args.gradients and not adapter.differentiable:
                print(f"error: --gradients needs autograd, and {args.framework} has none", file=sys.stderr)
                return USAGE_ERROR
        if reason := no_dtype_held(args.framework or args.sharded, args.dtypes, held):
            print(f"error: argument --dtypes: {reason}", file=sys.stderr)
            return USAGE_ERROR
        started = time.perf_counter()
        results = run_check(args, workers)
    except LoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    finally:
        workers.close()
    elapsed = time.perf_counter() - started
    how = (f"sharded over {args.sharded} meshes" if args.sharded else
           f"{args.framework}, on {engine_named(engine).runs_on}" if args.ranks and engine else
           f"{args.framework}, over micro-batches" if args.accumulation else args.framework)
    contract = check_spec(args, args.framework or "").bound_contract
    assumed = "; masked values assumed finite" if args.masked_values == "finite" else ""
    print("", *wrap(f"{args.target} ({how}; {contract.label}{assumed}), {elapsed:.0f} s"), sep="\n")
    notes = {} if args.sharded or args.ranks or not adapter.layouts_note else {args.target: adapter.layouts_note}
    meta = {"command": "check", "target": args.target, "seconds": elapsed, "seed": args.seed,
            "contract": contract.label, "masked_values": args.masked_values,
            **({"sharded": args.sharded} if args.sharded else {"framework": args.framework})}
    return _finish(results, args, notes, meta)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fuzz` and the installed `lossnorm-fuzz`: the exit status of the command (`entry_point` ends the
    process with it)."""
    prepare_process()  # the frameworks' process settings, before any is imported (workers inherit them)
    prog = "python -m fuzz" if argv is None and sys.argv[0].endswith("__main__.py") else "lossnorm-fuzz"
    given = list(sys.argv[1:] if argv is None else argv)
    args = parse(given, prog)  # usage errors exit 2 here (argparse)
    args.command_line = f"{prog} {shlex.join(given)}".strip()  # for the reports: the run again, as it was typed
    try:
        with tolerate_a_closed_stdout():
            return args.run(args)
    except KeyboardInterrupt:
        print("interrupted: no verdict", file=sys.stderr)
        return INTERRUPTED
    except Exception:  # the harness's own failure: never to be read as a verdict on the implementation
        traceback.print_exc()
        print("internal error: the fuzzer itself failed (exit 3), which says nothing about the implementation; "
              "please report it with the traceback above", file=sys.stderr)
        return INTERNAL_ERROR


def entry_point() -> NoReturn:
    """The process of `python -m fuzz` and of the installed `lossnorm-fuzz`: main's status, and the process ended
    without the interpreter's teardown (fuzz.run.processes.exit_without_teardown)."""
    exit_without_teardown(main())
