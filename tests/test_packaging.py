"""What `pip install .` installs: the four packages and one command, and an import of the API that pulls
in no framework."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_four_packages_and_one_command(tmp_path):
    # From a copy of the tracked files, as a clean clone would be (setuptools leaves build/ where it builds);
    # --no-build-isolation: setuptools from this environment, no index needed.
    source = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(name.rsplit("/", 1)[0] for name in names if name.endswith(".dist-info/RECORD"))
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert sorted(top_level) == ["bench", "fuzz", "impls", "reference"]
    assert {name.split("/", 1)[0] for name in names} == {"bench", "fuzz", "impls", "reference", info}
    assert "[console_scripts]\nlossnorm-fuzz = fuzz.cli:main" in entry_points


def test_importing_the_api_imports_no_framework():
    code = "import sys, fuzz; from fuzz import check, cases; print(sorted({'torch', 'jax'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]"
