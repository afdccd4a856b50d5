"""README's examples hold: every `python -m fuzz check examples/...` command it shows gives the verdict it
says, and the trainer-style test file it shows passes under pytest."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    """README's `python -m fuzz check examples/...` commands, a `\\` continuation joined."""
    text = README.replace("\\\n", " ")
    return [re.sub(r"\s+", " ", match).strip()
            for match in re.findall(r"^(?:\$ )?(python -m fuzz check examples/[^\n]*)$", text, re.MULTILINE)]


COMMANDS = _commands()
# what a command of README's must end with: an example that shows a bug is rejected, the others conform
REJECTED = {"fixed_length_default": "the padded width: L_max"}


def test_the_readme_shows_the_commands():
    assert len(COMMANDS) >= 5 and all(command.split()[4].startswith("examples/") for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[command.split()[4].split(":")[1] for command in COMMANDS])
def test_a_readme_command_gives_its_verdict(command):
    target = command.split()[4].split(":")[1]
    result = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    if target in REJECTED:
        assert result.returncode == 1, result.stdout + result.stderr
        assert REJECTED[target] in " ".join(result.stdout.split())
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "every cell conforms" in result.stdout


def test_the_readme_trainer_test_file_passes():
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "examples/test_verl_agg_loss.py"], cwd=ROOT, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "5 passed" in result.stdout
