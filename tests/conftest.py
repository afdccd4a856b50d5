"""Shared fixtures: Hypothesis profiles, and the (implementation, device) parameters every test uses."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import impls
from impls.frameworks import adapter_class, prepare_process

prepare_process()  # as the command line does, before any framework is imported: JAX gets its "cpu:1"
# One thread per pytest-xdist worker (which `make test` starts one per core): torch's OpenMP kernels (eager and
# torch.compile's C++) would otherwise start a thread per core in every worker and wait for each other on
# cores the other workers hold. Tests of properties, contract and blocked paths on 2 workers: 148 s -> 138 s
# (264 -> 241 CPU-s). Any thread count is a valid configuration: the tolerances allow any summation order.
os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile(
    "ci", derandomize=True, deadline=None, database=None, max_examples=15, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "thorough", deadline=None, max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Chosen by `pytest --hypothesis-profile NAME` (Hypothesis' own option) or the FUZZ_PROFILE variable.
settings.load_profile(os.environ.get("FUZZ_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# The first lines of a `python -c` command a test sends Ctrl-C to: SIGINT at its default, as a terminal starts a
# command. This test process may run with SIGINT ignored (started in the background of a shell without job
# control), and a child inherits that.
SIGINT_AS_A_TERMINAL_SETS_IT = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


def implementation_devices() -> list:
    """pytest params (implementation name, device) for every available built-in on every device it sees."""
    params = []
    for name in impls.BUILTIN_NAMES:
        try:
            implementation = impls.get_implementation(name)
        except RuntimeError as error:
            params.append(pytest.param(name, "cpu", id=f"{name}-unavailable",
                                       marks=pytest.mark.skip(reason=str(error))))
            continue
        for device in adapter_class(implementation.framework).device_kinds:
            marks = [] if device in implementation.devices else [
                pytest.mark.skip(reason=f"no {device} device for {name} here")]
            params.append(pytest.param(name, device, id=f"{name}-{device}", marks=marks))
    return params


def in_process_builtins() -> list[tuple[str, str]]:
    """(contract, built-in) for every built-in a library user calls as a plain function: the single-process
    ones, and the per-chunk ones the in-process accumulation engine calls (a rank form needs its ranks)."""
    from impls.registry import builtin_names
    from reference.contracts import CONTRACT_NAMES

    found = [(contract, name) for contract in CONTRACT_NAMES for name in builtin_names(contract)]
    for contract in CONTRACT_NAMES:
        for name in builtin_names(contract, sharded=True):
            try:
                if impls.get_implementation(name, contract).engines == ("accumulation",):
                    found.append((contract, name))
            except RuntimeError:
                continue
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the tests marked `long` first. With `--maxschedchunk 1` (the Makefile's), `--dist load` hands each
    worker two tests and then one more whenever it is down to one, so the long tests spread over the workers
    and the short ones fill in as workers free up. (Without it, each worker first gets a quarter of its share
    as one consecutive block: every long test landed on one worker, 863 s against the other's 576 s.)"""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
