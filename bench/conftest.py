"""pytest options for the benchmark suite (read when bench/ is on the command line), and its parameters.

    pytest bench/test_throughput.py --benchmark-enable --bench-devices cpu --bench-sizes small
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.plan import UserTarget, make_plan, targets


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bench", "throughput benchmarks (bench/)")
    group.addoption("--bench-contracts", default=None, help="comma-separated; default: every one with built-ins")
    group.addoption("--bench-implementations", default=None, help="comma-separated; default: all available")
    group.addoption("--bench-devices", default=None, help="comma-separated cpu,cuda; default: those present")
    group.addoption("--bench-dtypes", default=None, help="comma-separated; default: float32,bfloat16")
    group.addoption("--bench-sizes", default=None, help="comma-separated small,medium,large,xl; default per device")
    group.addoption("--bench-reduction", default=None, metavar="MODE",
                    help="the mode the reduction contract's rows run; default: its default, token-mean")
    group.addoption("--bench-target", default=None, metavar="TARGET",
                    help="a user's function (package.module:function or path/to/file.py:function) timed beside the "
                    "built-ins of its contract; needs --bench-framework")
    group.addoption("--bench-framework", default=None, help="how --bench-target runs, as check's --framework")
    group.addoption("--bench-rows", default=None, help="what D counts for --bench-target, as check's --rows")
    group.addoption("--bench-l-max", type=float, default=None, help="L_max for --bench-target, as check's --l-max")
    group.addoption("--bench-masked-values", default="any", choices=("any", "finite"),
                    help="finite: --bench-target's inputs hold no -inf at masked-out positions")
    group.addoption("--bench-timeout", type=float, default=None, metavar="SECONDS",
                    help="time limit of --bench-target's first call (a compile included), made as `check` makes "
                    "it before anything is timed (default: check's)")
    group.addoption("--bench-warmup", type=int, default=3, help="untimed calls before timing (at least)")
    group.addoption("--bench-paired-rounds", type=int, default=15,
                    help="rounds of the floor kernels' and an implementation's calls in alternation (at least)")
    group.addoption("--bench-paired-time", type=float, default=0.5,
                    help="seconds of those rounds per implementation row (at least; after the minimum rounds)")
    group.addoption("--bench-skipped", type=Path, default=None,
                    help="write what the selection skips, and why, to this JSON file ({what: reason})")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target_id" not in metafunc.fixturenames:
        return
    option = metafunc.config.getoption
    plan = make_plan(
        option("--bench-implementations"), option("--bench-devices"), option("--bench-dtypes"),
        option("--bench-sizes"), option("--bench-contracts"), option("--bench-reduction"),
        user_target(metafunc.config),
    )
    found, reasons = targets(plan)
    # For `python -m bench`, which reports why a run timed nothing without parsing pytest's output.
    if option("--bench-skipped") is not None:
        option("--bench-skipped").write_text(json.dumps(reasons, indent=1))
    params = [pytest.param(target.id, id=target.id) for target in found]
    params += [
        pytest.param(None, id=f"{what}-unavailable", marks=pytest.mark.skip(reason=why))
        for what, why in reasons.items()
    ]
    metafunc.parametrize("target_id", params)


def user_target(config: pytest.Config) -> UserTarget | None:
    """The user's function the options name, with the contract it declares; None without --bench-target."""
    target = config.getoption("--bench-target")
    if not target:
        return None
    framework = config.getoption("--bench-framework")
    if not framework:
        raise pytest.UsageError("--bench-target needs --bench-framework")
    return UserTarget.declared(target, framework, config.getoption("--bench-reduction"),
                               config.getoption("--bench-rows"), config.getoption("--bench-l-max"),
                               config.getoption("--bench-masked-values"))


@pytest.fixture(scope="session")
def user(request: pytest.FixtureRequest) -> UserTarget | None:
    return user_target(request.config)


@pytest.fixture(scope="session")
def reduction_mode(request: pytest.FixtureRequest) -> str | None:
    return request.config.getoption("--bench-reduction")


@pytest.fixture(scope="session")
def call_timeout(request: pytest.FixtureRequest) -> float | None:
    """--bench-timeout, or None for `check`'s default (read where a user's row runs: the built-ins' rows need no
    fuzz package)."""
    given = request.config.getoption("--bench-timeout")
    return None if given is None else float(given)


@pytest.fixture(scope="session")
def warmup_calls(request: pytest.FixtureRequest) -> int:
    return max(1, int(request.config.getoption("--bench-warmup")))


@pytest.fixture(scope="session")
def pairing(request: pytest.FixtureRequest) -> tuple[int, float]:
    """(min rounds, max seconds) of the alternating floor-and-implementation timing (bench/paired.py)."""
    return (max(1, int(request.config.getoption("--bench-paired-rounds"))),
            float(request.config.getoption("--bench-paired-time")))
