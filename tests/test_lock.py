"""The lock `make setup` installs (lock/generate.py): two disjoint halves that pin every package, each line of
requirements.txt kept as written there, split so that the two pip processes have about equal work."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("lock_generate", ROOT / "lock" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generator()  # a script, not a package: loaded from its file


def test_the_halves_are_disjoint_and_keep_every_line_of_requirements_txt():
    first, second = (generate.pinned_lines(path) for path in generate.HALVES)
    assert first and second and not set(first) & set(second)
    locked = {**first, **second}
    for name, line in generate.pinned_lines(generate.REQUIREMENTS).items():
        assert locked.get(name) == line, f"requirements.txt's {line!r} is not in the lock: run make lock"
    for line in locked.values():
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^=;\s]+(; .+)?", line), line


def test_the_largest_work_goes_first_each_to_the_lighter_half():
    assert generate.split([("b==1", 6), ("a==1", 10), ("c==1", 5), ("d==1", 1)]) == (["a==1", "d==1"], ["b==1", "c==1"])
    assert generate.split([]) == ([], [])
