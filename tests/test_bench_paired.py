"""The side-by-side timing of an implementation and the floor (bench/paired.py), on a simulated clock: a machine
whose speed drifts slows both in the same round, so their ratio is what it is."""

from __future__ import annotations

import pytest

from bench import paired


class DriftingMachine:
    """A clock that advances only when a simulated call runs: a call of `cost` takes cost x the machine's
    slowdown, and the slowdown grows with every call (other tenants arriving)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slowdown = 1.0
        self.growth = 1.01  # per call
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def call(self, cost: float):  # type: ignore[no-untyped-def]
        def run() -> float:
            self.now += cost * self.slowdown
            self.slowdown *= self.growth
            self.calls += 1
            return 0.0

        return run


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> DriftingMachine:
    simulated = DriftingMachine()
    monkeypatch.setattr(paired.time, "perf_counter", simulated.clock)
    return simulated


def test_a_drift_that_slows_both_leaves_their_ratio(machine: DriftingMachine) -> None:
    # The machine slows by 1% a call. Timed apart (the floor's 65 calls, then the row's), the row would seem to
    # take 8.7 times the floor's time; timed in alternation, it takes what it costs: 1.25 times, within the 1.01^3
    # that the settling calls put between a floor call and the row's next one.
    result = paired.alternate(machine.call(1.25), {"fast-sum": machine.call(1.0)}, min_rounds=65, max_seconds=0)
    assert result.rounds == 65 and machine.calls == 2 * 65 * (1 + paired.SETTLING_CALLS)
    assert result.floor_kernel == "fast-sum"
    assert result.fraction == pytest.approx(0.8, rel=0.04)


def test_the_fastest_floor_kernel_sets_the_floor(machine: DriftingMachine) -> None:
    machine.growth = 1.0  # a steady machine
    floors = {"slow-sum": machine.call(3.0), "fast-sum": machine.call(1.0), "mid-sum": machine.call(2.0)}
    result = paired.alternate(machine.call(2.0), floors, min_rounds=5, max_seconds=0)
    assert result.floor_kernel == "fast-sum"
    assert result.fraction == 0.5


def test_it_runs_the_minimum_rounds_then_until_the_time_is_spent(machine: DriftingMachine) -> None:
    result = paired.alternate(machine.call(0.01), {"sum": machine.call(0.01)}, min_rounds=3, max_seconds=1.0)
    assert result.rounds > 3 and machine.now >= 1.0 and machine.calls == 2 * result.rounds * (1 + paired.SETTLING_CALLS)


@pytest.mark.parametrize(("floors", "min_rounds", "message"), [
    ({}, 5, "no floor kernel"),
    ({"sum": lambda: 0.0}, 0, "min_rounds must be at least 1, got 0"),
])
def test_nothing_to_pair_with_is_an_error(floors, min_rounds, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        paired.alternate(lambda: 0.0, floors, min_rounds=min_rounds, max_seconds=0)


def test_a_row_timed_under_two_different_loads_is_marked_in_the_table() -> None:
    """A row's % of floor comes from its calls beside the floor's, its median from its own: where they differ by
    more than 2x the load changed between them, and the table says so instead of printing two numbers that disagree."""
    from bench.records import Record
    from bench.report import table

    def row(name: str, median: float, paired: float) -> Record:
        return Record(name, "reduction", "token-mean", "cpu", "float32", 1024, 16384, median, 80 << 20, 30.0, 40.0,
                      2e-3 / paired, 2e-3, paired)

    steady, unsteady = row("numpy", 2.6e-3, 2.8e-3), row("torch-compile", 2.6e-3, 15.3e-3)
    text = table([steady, unsteady])
    lines = {line.split()[2]: line for line in text.splitlines() if line.startswith("reduction")}
    assert lines["torch-compile"].endswith("13.1% ~") and lines["numpy"].endswith("71.4%")
    assert "~: the row's median beside the floor (its % of floor) and its own median differ by more than 2x" in text
    assert "~:" not in table([steady])
