"""What `pip install .` installs: the four packages with every subpackage and one command, a copy that works
from outside the checkout, and an import of the API that pulls in no framework."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from fuzz.version import VERSION

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "fuzz", "impls", "reference")  # the top-level packages the wheel installs, and only these


def tracked_files() -> list[str]:
    result = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in result.stdout.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # From a copy of the tracked files, as a clean clone would be (setuptools leaves build/ where it builds, and
    # an untracked file in the checkout must not hide a file missing from the repository);
    # --no-build-isolation: setuptools from this environment, no index needed.
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp), str(source)], check=True, capture_output=True, cwd=tmp)
    (built,) = tmp.glob("*.whl")
    return built


def test_the_wheel_holds_every_tracked_module_of_the_four_packages_and_one_command(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(name.rsplit("/", 1)[0] for name in names if name.endswith(".dist-info/RECORD"))
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert sorted(top_level) == list(PACKAGES)
    assert info == f"lossnorm_difftest-{VERSION}.dist-info"  # the version the commands print, read from fuzz
    # Nothing else at the top: not tests/, not the corpus.
    assert {name.split("/", 1)[0] for name in names} == {*PACKAGES, info}
    # Against the tracked tree, not a list of subpackages: a subpackage added later (with or without a line in
    # pyproject) is checked the day it is committed.
    tracked = {name for name in tracked_files() if name.endswith(".py") and PurePosixPath(name).parts[0] in PACKAGES}
    installed = {name for name in names if name.endswith(".py")}
    assert installed == tracked
    assert "[console_scripts]\nlossnorm-fuzz = fuzz.cli:entry_point" in entry_points


def test_the_installed_wheel_runs_from_outside_the_checkout(wheel, tmp_path):
    # A fresh venv that sees this environment's third-party packages (torch, numpy, hypothesis...) through a .pth
    # line appended after its own site-packages, so nothing is installed twice. The project itself is not
    # installed here (the tests import it from the checkout), so the venv's only copy is the wheel's.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "this_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # pip of this environment, run for the venv's interpreter (pip --python): no ensurepip, no index.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "-q", str(wheel)], check=True, capture_output=True, cwd=tmp_path)

    # Outside the checkout and without PYTHONPATH, so the checkout cannot stand in for a missing module.
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    assert not cwd.resolve().is_relative_to(ROOT)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}

    def run(*args):
        return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)

    command = env_dir / "bin" / "lossnorm-fuzz"
    usage = run(command, "--help")
    assert usage.returncode == 0, usage.stderr
    assert "usage:" in usage.stdout
    assert run(command, "--version").stdout == f"lossnorm-fuzz {VERSION}\n"

    code = ("import json, fuzz, fuzz.engines, impls.frameworks, fuzz.cli; "
            "print(json.dumps([m.__file__ for m in (fuzz, fuzz.engines, impls.frameworks, fuzz.cli)]))")
    imported = run(python, "-c", code)
    assert imported.returncode == 0, imported.stderr
    for file in json.loads(imported.stdout):
        assert Path(file).resolve().is_relative_to(env_dir.resolve()), f"{file} is not the installed copy"

    def check(corpus_file):
        return run(command, "check", f"{ROOT / 'tests' / 'corpus' / corpus_file}:loss_normalization",
                   "--framework", "numpy", "--dtypes", "float32", "--max-examples", "5", "--jobs", "1",
                   "--json", "r.json")

    correct = check("numpy_einsum.py")
    assert correct.returncode == 0, correct.stdout + correct.stderr
    assert json.loads((cwd / "r.json").read_text())["ok"] is True
    # The installed copy also rejects: exit 1 is a counterexample, not a crash (2: load error, 3: fuzzer failed).
    buggy = check("numpy_mask_ignored.py")
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert json.loads((cwd / "r.json").read_text())["ok"] is False


def test_importing_the_api_imports_no_framework():
    code = "import sys, fuzz; from fuzz import check, cases; print(sorted({'torch', 'jax'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]"
