"""`python -m bench`: run the throughput suite under pytest-benchmark, then print the table, write the plot
and (with --json) the records.

pytest-benchmark's own JSON is kept (OUT/pytest-benchmark.json) and the run is also autosaved to
.benchmarks/, so two runs compare with `pytest-benchmark compare 0001 0002` (or two JSON paths).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = "bench/test_throughput.py"

# (min rounds, max seconds per row, untimed warm-up calls): rounds are many enough for a stable median
# on a shared machine; --quick trades that for speed.
TIMING = {"default": (15, 0.5, 3), "quick": (5, 0.1, 2)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--implementations", help="comma-separated; default: every available built-in")
    parser.add_argument("--devices", help="comma-separated from cpu,cuda; default: every device present")
    parser.add_argument("--dtypes", help="comma-separated; default: float32,bfloat16")
    parser.add_argument("--sizes", help="comma-separated from small,medium,large,xl; "
                        "default: small,medium,large on cpu, and xl too on cuda")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a rougher, faster run")
    parser.add_argument("--json", type=Path, help="write the records (one per row) to this path")
    parser.add_argument("--out", type=Path, default=Path("out/bench"),
                        help="where pytest-benchmark's JSON and the plot go (default: out/bench)")
    parser.add_argument("--no-save", action="store_true", help="do not autosave the run to .benchmarks/")
    parser.add_argument("--cpus", help="comma-separated CPU ids to pin the run to (e.g. 0): every framework then "
                        "sizes its threads to them; steadier numbers on a shared machine")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest (e.g. -k torch)")
    return parser.parse_args(argv)


def pytest_command(args: argparse.Namespace, report_json: Path) -> list[str]:
    rounds, max_time, warmup = TIMING["quick" if args.quick else "default"]
    command = [
        sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", "--benchmark-enable",
        f"--benchmark-json={report_json}", f"--benchmark-min-rounds={rounds}",
        f"--benchmark-max-time={max_time}", "--benchmark-quiet", f"--bench-warmup={warmup}",
    ]
    if not args.no_save:
        command.append("--benchmark-autosave")
    for option in ("implementations", "devices", "dtypes", "sizes"):
        if getattr(args, option):
            command.append(f"--bench-{option}={getattr(args, option)}")
    return command + list(args.pytest_args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.plan import make_plan  # validates the options before anything runs

    try:
        make_plan(args.implementations, args.devices, args.dtypes, args.sizes)
    except ValueError as error:
        print(f"python -m bench: {error}", file=sys.stderr)
        return 2
    out = args.out if args.out.is_absolute() else ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    report_json = out / "pytest-benchmark.json"
    report_json.unlink(missing_ok=True)
    if args.cpus:  # inherited by pytest; OpenMP, XLA and the NumPy implementation size their threads from it
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})
    load_before = os.getloadavg()[0]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    status = subprocess.run(pytest_command(args, report_json), cwd=ROOT, env=env).returncode
    if not report_json.exists():  # everything was skipped (pytest says why), or pytest failed early
        print("python -m bench: nothing was benchmarked", file=sys.stderr)
        return status

    from bench.records import floor_kernel, records_from_report, write_records
    from bench.report import plot, table

    report = json.loads(report_json.read_text())
    records = records_from_report(report)
    if args.json:
        write_records(records, args.json)
        print(f"records: {args.json}")
    png = plot(records, out / "throughput.png")
    print(f"pytest-benchmark JSON: {report_json}")
    print(f"plot: {png}" if png else "plot: skipped (matplotlib is not installed)")
    print()
    from impls.cores import usable_cores

    cpus = usable_cores()
    print(f"{cpus} CPU(s); load average {load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after "
          f"(other processes' load slows threaded rows most)")
    print(table(records, lambda r: floor_kernel(report, r.device, r.dtype, r.batch, r.tokens)))
    return status


if __name__ == "__main__":
    sys.exit(main())
