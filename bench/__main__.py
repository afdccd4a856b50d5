"""`python -m bench`: run the throughput suite under pytest-benchmark, then print the table, write the
plot and (with --json) the records.

Everything the run writes goes under the directory it is started from: the --out folder
(pytest-benchmark's JSON, the plot) and the autosaved runs in .benchmarks/, so two runs
compare there with `pytest-benchmark compare 0001 0002` (or two JSON paths). Nothing is
written next to the installed package.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.contracts import REDUCTION, canonical_mode, mode_spellings
from bench.plan import CHOICES, devices_here, foreign_implementations, parse_names

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent  # where `bench` imports from: the checkout, or site-packages for an installed copy
SUITE = PACKAGE / "test_throughput.py"

# (min rounds, max seconds per row, untimed warm-up calls): rounds are many enough for a stable median
# on a shared machine; --quick trades that for speed.
TIMING = {"default": (15, 0.5, 3), "quick": (5, 0.1, 2)}

# The suite's pytest settings, given here and read from no config file (`-c os.devnull`). pytest looks for its
# config upwards from the test file: in the checkout that finds pyproject.toml, but pyproject.toml is not
# installed, and above an installed copy (a virtualenv made inside some project) it may find another project's,
# whose addopts and plugins must not change this run.
PYTEST_SETTINGS = ["-p", "no:cacheprovider", "-ra",
                   "-W", "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
                   # a row refused before timing (a --target that is wrong) says so itself
                   "-W", "ignore:Benchmark fixture was not used"]
INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended (as `python -m fuzz` exits)
# pytest.ExitCode.NO_TESTS_COLLECTED, without importing pytest into this process.
NO_TESTS_COLLECTED = 5


def _selection(option: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse type for a selection option: argparse then reports a bad name as `argument --OPTION: ...`."""

    def parse(text: str) -> tuple[str, ...]:
        try:
            return parse_names(option, text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _reduction_mode(text: str) -> str:
    """The reduction mode as given, once the contract's Parameter reads it (an alias resolved: a trainer's spelling
    may carry its convention, which --target's declaration keeps), or the error naming its choices (argparse
    reports it as `argument --reduction: ...`)."""
    try:
        canonical_mode(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text.strip()


def _usable_cpus() -> set[int] | None:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


def _ranges(cpus: set[int]) -> str:
    """0,1,2,3,8 -> "0-3,8": a 256-core machine's list stays one line."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def parse_cpus(text: str) -> set[int]:
    """CPU ids like "0,1" or "0-3", each one this process may use (its affinity, not the host's cores)."""
    usable = _usable_cpus()
    if usable is None:
        raise argparse.ArgumentTypeError("pinning needs os.sched_setaffinity, which this platform lacks")
    may_use = f"this process may use CPUs {_ranges(usable)}"
    cpus: set[int] = set()
    for part in filter(None, (part.strip() for part in text.split(","))):
        bounds = part.split("-")
        if len(bounds) > 2 or not all(bound.isdigit() for bound in bounds) or int(bounds[0]) > int(bounds[-1]):
            raise argparse.ArgumentTypeError(f"{part!r} is not a CPU id (or a range like 0-3); {may_use}")
        cpus.update(range(int(bounds[0]), int(bounds[-1]) + 1))
    if not cpus:
        raise argparse.ArgumentTypeError(f"no CPU given; {may_use}")
    if not cpus <= usable:
        outside = cpus - usable
        which = f"CPU {_ranges(outside)} is" if len(outside) == 1 else f"CPUs {_ranges(outside)} are"
        raise argparse.ArgumentTypeError(f"{which} not usable by this process; {may_use}")
    return cpus


def _framework_choices() -> tuple[str, ...]:
    """`check --framework`'s choices (names only: no framework is imported)."""
    from impls.frameworks import check_modes

    return tuple(check_modes())


def _report_path(text: str) -> Path:
    """A report's path, refused before the run if it cannot be written (as the fuzzer's --json and --html)."""
    from fuzz.report.files import unwritable_reason

    reason = unwritable_reason(text)
    if reason is not None:
        raise argparse.ArgumentTypeError(f"cannot write the report there: {reason}")
    return Path(text)


class _PrintVersion(argparse.Action):
    """argparse's version action, with the version read only when asked: it lives in fuzz, whose imports a
    benchmark run does not otherwise need."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the suite's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from fuzz.version import VERSION

        print(parser.prog, VERSION)  # on stdout, as argparse's own version action prints
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_PrintVersion)
    choices = {option: ",".join(names) for option, names in CHOICES.items()}
    parser.add_argument("--contracts", type=_selection("contracts"),
                        help=f"comma-separated from {choices['contracts']}; default: every one with single-process "
                        "built-ins, side by side in one run")
    parser.add_argument("--implementations", type=_selection("implementations"),
                        help=f"comma-separated from {choices['implementations']} (any contract's built-ins; each "
                        "runs for the selected contracts that have it); default: every available one")
    parser.add_argument("--reduction", type=_reduction_mode, metavar="MODE",
                        help=f"the mode the reduction contract's rows run: {mode_spellings()}; default: token-mean")
    parser.add_argument("--devices", type=_selection("devices"),
                        help=f"comma-separated from {choices['devices']}; default: every device present")
    parser.add_argument("--dtypes", type=_selection("dtypes"),
                        help=f"comma-separated from {choices['dtypes']}; default: float32,bfloat16")
    parser.add_argument("--sizes", type=_selection("sizes"), help=f"comma-separated from {choices['sizes']}; "
                        "default: small,medium,large on cpu, and xl too on cuda")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a rougher, faster run")
    parser.add_argument("--json", type=_report_path, metavar="PATH",
                        help="write the records (one per row) to this path (checked before the run)")
    parser.add_argument("--html", type=_report_path, metavar="PATH",
                        help="write one self-contained HTML page: the throughput table and the plot per device "
                        "and dtype (checked before the run, as --json)")
    parser.add_argument("--out", type=Path, default=Path("out/bench"),
                        help="where pytest-benchmark's JSON and the plot go (default: out/bench, in the "
                        "current directory)")
    parser.add_argument("--no-save", action="store_true",
                        help="do not autosave the run (nor make .benchmarks/ in the current directory)")
    yours = parser.add_argument_group(
        "your own function", "timed beside the built-ins of its contract and the floor, in one run; loaded\n"
        "and run as `python -m fuzz check` runs it (the same TARGET, --framework and declared contract),\n"
        "and checked against the exact reference under the contract's tolerance before it is timed")
    yours.add_argument("--target", metavar="TARGET",
                       help="package.module:function or path/to/file.py:function, with --framework; its contract is "
                       "the loss reduction where --reduction is given, else the magnitude diagnostic")
    yours.add_argument("--framework", choices=_framework_choices(), metavar="FRAMEWORK",
                       help=f"how TARGET runs ({', '.join(_framework_choices())}); torch-compile and jax time it "
                       "compiled")
    yours.add_argument("--rows", choices=("all", "nonempty"),
                       help="what D counts in TARGET's reduction, as `check --rows`; default: all, or nonempty for "
                       "tunix's sequence-mean-token-mean")
    yours.add_argument("--l-max", type=float, metavar="L",  # the contract checks it: a length of at least 1
                       help="L_max of TARGET's fixed-length reduction, as `check --l-max`")
    yours.add_argument("--masked-values", choices=("any", "finite"),
                       help="finite: TARGET's padding is finite by construction, as `check --masked-values finite` "
                       "declares (the timed inputs then hold no -inf at masked-out positions); default: any")
    yours.add_argument("--timeout", type=float, metavar="SECONDS",
                       help="time limit of TARGET's first call (a compile included), made as `check` makes it before "
                       "anything is timed: a call that overruns fails its row (default 120)")
    parser.add_argument("--cpus", type=parse_cpus,
                        help="comma-separated CPU ids or ranges to pin the run to (e.g. 0): every framework then "
                        "sizes its threads to them; steadier numbers on a shared machine")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest (e.g. -k torch)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def pytest_command(args: argparse.Namespace, out: Path, storage: Path) -> list[str]:
    """The pytest run of the suite, with every path absolute: it runs in the user's directory."""
    rounds, max_time, warmup = TIMING["quick" if args.quick else "default"]
    command = [
        sys.executable, "-m", "pytest", str(SUITE), "-q", "-c", os.devnull, f"--rootdir={ROOT}",
        f"--confcutdir={PACKAGE}", *PYTEST_SETTINGS, "--benchmark-enable", f"--benchmark-storage=file://{storage}",
        f"--benchmark-json={out / 'pytest-benchmark.json'}", f"--benchmark-min-rounds={rounds}",
        f"--benchmark-max-time={max_time}", "--benchmark-quiet", f"--bench-warmup={warmup}",
        f"--bench-paired-rounds={rounds}", f"--bench-paired-time={max_time}",
        f"--bench-skipped={out / 'skipped.json'}",
    ]
    if not args.no_save:
        command.append("--benchmark-autosave")
    for option in CHOICES:
        if getattr(args, option):
            command.append(f"--bench-{option}={','.join(getattr(args, option))}")
    if args.reduction:
        command.append(f"--bench-reduction={args.reduction}")
    if args.target:
        command += [f"--bench-target={args.target}", f"--bench-framework={args.framework}"]
        command += [f"--bench-rows={args.rows}"] if args.rows else []
        command += [f"--bench-l-max={args.l_max!r}"] if args.l_max is not None else []
        command += [f"--bench-masked-values={args.masked_values}"] if args.masked_values else []
        command += [f"--bench-timeout={args.timeout!r}"] if args.timeout is not None else []
    return command + list(args.pytest_args)


def user_target_error(args: argparse.Namespace) -> str | None:
    """Why `--target` and the options that go with it do not make a run, or None: checked before the run, with
    the function loaded (its framework imported) as `check` loads it."""
    if not args.target:
        for option in ("framework", "rows", "l_max", "masked_values", "timeout"):
            if getattr(args, option) is not None:
                return f"argument --{option.replace('_', '-')}: it says how --target runs: it needs --target"
        return None
    if not args.framework:
        return f"argument --target: it needs --framework (how the function runs: {', '.join(_framework_choices())})"
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        return f"argument --timeout: must be a positive number of seconds, got {args.timeout:g}"
    from bench.plan import UserTarget

    try:
        user = UserTarget.declared(args.target, args.framework, args.reduction, args.rows, args.l_max,
                                   args.masked_values or "any")
    except ValueError as error:  # it names the option
        return str(error)
    if args.contracts and list(args.contracts) != [user.contract]:
        return (f"argument --contracts: --target is timed beside the built-ins of its own contract, {user.contract} "
                f"(the loss reduction where --reduction is given), not {','.join(args.contracts)}")
    from bench.user_rows import user_row
    from fuzz.loader import LoadError

    try:
        user_row(args.target, args.framework, user.contract, dict(user.parameters))
    except LoadError as error:  # CallShapeError is one: the function cannot take the contract's call
        return f"argument --target: {error}{_per_micro_batch_timing(error)}"
    return None


def _per_micro_batch_timing(error: Exception) -> str:
    """How to time a per-micro-batch loss (the loader found it takes the step's counts, which depend on each
    input's mask): bench times a whole batch."""
    if not getattr(error, "step_counts", ()):
        return ""
    from reference.contracts import get_contract

    mask = next(spec.name for spec in get_contract("accumulation").inputs if spec.kind == "bool")
    return ("; bench times a whole batch: time it through a function of yours that computes those counts from "
            f"{mask} (the whole batch as one step: R = G = 1) and calls it")


def nothing_benchmarked(status: int, skipped_json: Path) -> str:
    """Why a run timed no row: the selection's skip reasons, and pytest's failure if it failed."""
    reasons = list(json.loads(skipped_json.read_text()).values()) if skipped_json.exists() else []
    if status == NO_TESTS_COLLECTED and not reasons:
        reasons.append("no row was selected (check the options and any -k after --)")
    elif status not in (0, NO_TESTS_COLLECTED):
        reasons.append(f"pytest exited {status} (its output is above)")
    return "; ".join(reasons) or "every row was skipped"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # names, modes, sizes, dtypes and CPUs are checked here: no framework imported yet
    if args.json and args.html:
        from fuzz.report.files import clashing_reports

        if clash := clashing_reports({"--json": str(args.json), "--html": str(args.html)}):
            parser.error(clash)
    if error := user_target_error(args):
        parser.error(error)
    if args.reduction and args.contracts and REDUCTION not in args.contracts:
        parser.error(f"argument --reduction: the {REDUCTION} contract is not among --contracts "
                     f"{','.join(args.contracts)}")
    if args.contracts and args.implementations:  # names only: still no framework imported
        foreign = foreign_implementations(args.contracts, args.implementations)
        if foreign:
            parser.error(f"argument --implementations: {', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} "
                         f"no built-in of the contract(s) {', '.join(args.contracts)}")
    if args.devices:  # finding a GPU imports the frameworks: seconds, but far less than a run that times nothing
        here = devices_here(args.devices)
        missing = [device for device in args.devices if device not in here]
        if missing:
            parser.error(f"argument --devices: no {', '.join(missing)} device here; "
                         f"devices: {', '.join(here) or 'none'}")
    # The user's directory, not the package's: an installed copy lives in site-packages.
    cwd = Path.cwd()
    out = cwd / args.out
    out.mkdir(parents=True, exist_ok=True)
    report_json = out / "pytest-benchmark.json"
    skipped_json = out / "skipped.json"
    for stale in (report_json, skipped_json):
        stale.unlink(missing_ok=True)
    if args.cpus:  # inherited by pytest; OpenMP, XLA and the NumPy implementation size their threads from it
        os.sched_setaffinity(0, args.cpus)
    load_before = os.getloadavg()[0]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # pytest caches its rewritten test modules next to them, in the package's __pycache__.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # pytest-benchmark makes its storage folder even when it saves nothing: --no-save gives it a scratch one
    with tempfile.TemporaryDirectory(prefix="bench-unsaved-") as scratch:
        storage = Path(scratch) if args.no_save else cwd / ".benchmarks"
        status = subprocess.run(pytest_command(args, out, storage), env=env).returncode
    report = json.loads(report_json.read_text()) if report_json.exists() else {}
    if not report.get("benchmarks"):
        print(f"python -m bench: nothing was benchmarked: {nothing_benchmarked(status, skipped_json)}",
              file=sys.stderr)
        return 1 if status in (0, NO_TESTS_COLLECTED) else status

    from bench.records import floor_kernel, records_from_report, write_records
    from bench.report import plot, table

    records = records_from_report(report)
    if args.json:
        write_records(records, cwd / args.json)
        print(f"records: {args.json}")
    if args.html:
        from fuzz.report.html import write_html

        write_html(str(cwd / args.html), {"kind": "bench", "records": [record.as_json() for record in records],
                                          "command": " ".join(["python -m bench", *(argv or sys.argv[1:])])})
        print(f"HTML report: {args.html}")
    png = plot(records, out / "throughput.png")
    print(f"pytest-benchmark JSON: {report_json}")
    print(f"plot: {png}" if png else "plot: skipped (matplotlib is not installed)")
    print()
    from impls.cores import usable_cores

    cpus = usable_cores()
    print(f"{cpus} CPU(s); load average {load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after "
          f"(other processes' load slows threaded rows most)")
    print(table(records, lambda record: floor_kernel(report, record)))
    if status != 0:
        print(f"python -m bench: some rows failed and are not in the table (pytest exited {status}; each one's "
              "reason is above)", file=sys.stderr)
    return status


def entry_point() -> int:
    """`main`, with Ctrl-C an exit status: pytest, in this process group, is interrupted too (and `subprocess.run`
    kills it if not)."""
    try:
        return main()
    except KeyboardInterrupt:
        print("python -m bench: interrupted: nothing timed is reported", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(entry_point())
