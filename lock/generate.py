"""Write the lock (`make lock`): every package that `pip install -r requirements.txt` installs into a fresh venv,
pinned, in two halves of about equal work for pip, which `make setup` installs at once, one pip process each
with --no-deps, and then checks whole with `pip check`.

One pip process unpacks and byte-compiles its wheels on one core; torch, triton and jaxlib are most of the
venv's 2.6 GB, so two processes on disjoint halves take about half the time of one that resolves the set. The
halves are disjoint, so the two processes never write the same package.

A package that requirements.txt pins keeps its line from there, markers and all (triton is Linux only); the others
are pinned to the version the fresh venv got. Run it with the Python the README's setup uses; standard library
only."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
HALVES = (ROOT / "lock" / "first-half.txt", ROOT / "lock" / "second-half.txt")
NOT_LOCKED = {"pip"}  # the setup upgrades pip itself, before the lock
# pip byte-compiles every .py file it installs, which costs it far more per byte than unpacking the rest (the
# ratio is measured in docs/measurements.md): a package's work is its .py bytes times this, plus all its bytes.
PYTHON_SOURCE_WEIGHT = 25

# Run inside the scratch venv: each installed distribution's name, version, .py bytes and all its bytes.
_LIST = """
import json, importlib.metadata as m
out = []
for d in m.distributions():
    sizes = [(str(f).endswith(".py"), f.size or 0) for f in d.files or []]
    out.append([d.metadata["Name"], d.version, sum(s for py, s in sizes if py), sum(s for _, s in sizes)])
print(json.dumps(out))
"""


def work(source_bytes: int, all_bytes: int) -> int:
    """What installing a package costs pip, in units of unpacked bytes."""
    return PYTHON_SOURCE_WEIGHT * source_bytes + all_bytes


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str | None:
    """The distribution a requirements line names, or None for a comment or a blank line."""
    text = line.split("#", 1)[0].strip()
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)
    return canonical(match.group(0)) if match else None


def pinned_lines(path: Path) -> dict[str, str]:
    """The requirement lines of a requirements file, by canonical name."""
    return {name: line.strip() for line in path.read_text().splitlines() if (name := requirement_name(line))}


def installed(requirements: Path) -> list[tuple[str, str, int]]:
    """(name, version, installing work) of every distribution a fresh venv gets from `requirements`."""
    with tempfile.TemporaryDirectory() as scratch:
        venv = Path(scratch) / "venv"
        python = str(venv / "bin" / "python")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "-r", str(requirements)], check=True)
        # run from the scratch folder: from the checkout, `-c` would list the project's own metadata too
        listed = subprocess.run([python, "-c", _LIST], check=True, capture_output=True, text=True,
                                cwd=scratch).stdout
    return [(name, version, work(source, total)) for name, version, source, total in json.loads(listed)]


def split(packages: list[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """Lines in two halves of about equal work: the largest first, each to the lighter half."""
    halves: tuple[list[str], list[str]] = ([], [])
    sizes = [0, 0]
    for line, size in sorted(packages, key=lambda item: (-item[1], item[0])):
        lighter = sizes.index(min(sizes))
        halves[lighter].append(line)
        sizes[lighter] += size
    return sorted(halves[0], key=str.lower), sorted(halves[1], key=str.lower)


def lock_lines(requirements: Path, distributions: list[tuple[str, str, int]]) -> list[tuple[str, int]]:
    pinned = pinned_lines(requirements)
    lines = []
    for name, version, size in distributions:
        key = canonical(name)
        if key in NOT_LOCKED:
            continue
        public = version.split("+", 1)[0]  # a local build tag (torch's +cpu) is the index's business
        lines.append((pinned.get(key, f"{name}=={public}"), size))
    for name in sorted(set(pinned) - {requirement_name(line) for line, _ in lines}):
        if ";" not in pinned[name]:
            raise SystemExit(f"requirements.txt names {name}, which the fresh venv does not have")
        lines.append((pinned[name], 0))  # its marker skips it on this platform; the lock keeps it for the others
    return lines


HEADER = """# Written by `make lock` (lock/generate.py) from requirements.txt: edit that file, then run it.
# Half of every package requirements.txt installs, pinned. `make setup` installs the two halves at once (pip
# --no-deps, one process each), then `pip check`s the whole.
"""


def main() -> None:
    summary = __doc__.split("\n\n")[0].replace("\n", " ")
    argparse.ArgumentParser(prog="lock/generate.py", description=summary).parse_args()  # --help, and no others
    first, second = split(lock_lines(REQUIREMENTS, installed(REQUIREMENTS)))
    for path, lines in zip(HALVES, (first, second)):
        path.write_text(HEADER + "\n".join(lines) + "\n")
        print(f"{path.relative_to(ROOT)}: {len(lines)} packages")


if __name__ == "__main__":
    main()
