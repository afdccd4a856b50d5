"""An implementation's fraction of the floor, timed side by side: its calls alternate with the floor kernels' calls
in one loop, so that both are timed under the same conditions.

On a shared machine the memory bandwidth a process gets moves from minute to minute (other tenants share the
host's memory and last-level cache): the floor of the same bytes, timed once per group before its rows, has moved
by a factor of two between runs minutes apart (docs/measurements.md). A ratio of two medians timed a minute apart
carries that drift in either direction; a ratio of medians timed in alternation, round by round, does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.floor import Timed


@dataclass(frozen=True)
class Paired:
    floor_s: float  # the median of the fastest floor kernel, over the alternating rounds
    floor_kernel: str
    median_s: float  # the implementation's median over the same rounds
    rounds: int

    @property
    def fraction(self) -> float:
        return self.floor_s / self.median_s


def _median(times: list[float]) -> float:
    ordered = sorted(times)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# Untimed calls before each timed one, on every switch between floor kernel and implementation: the previous
# framework's threads may still be spinning (an OpenMP region's threads spin a while after it ends, and so do
# XLA's and NumPy's pools), and the first call after a switch would pay for that, not for its own work.
SETTLING_CALLS = 2


def _timed(call: Callable[[], object]) -> float:
    for _ in range(SETTLING_CALLS):
        call()
    start = time.perf_counter()
    call()  # each call waits for its device (the floor kernels and `adapter.synchronize` do)
    return time.perf_counter() - start


def alternate(call: Callable[[], object], floors: dict[str, Timed], min_rounds: int,
              max_seconds: float) -> Paired:
    """Rounds of one call of every floor kernel, then one of `call`, at least `min_rounds` of them and then until
    `max_seconds` have passed; the fastest floor kernel's median and `call`'s median over those rounds. Every
    callable has been warmed up by the caller (compiled, its output touched)."""
    if not floors:
        raise ValueError("no floor kernel runs on this device")
    if min_rounds < 1:
        raise ValueError(f"min_rounds must be at least 1, got {min_rounds}")
    floor_times: dict[str, list[float]] = {name: [] for name in floors}
    call_times: list[float] = []
    started = time.perf_counter()
    while len(call_times) < min_rounds or time.perf_counter() - started < max_seconds:
        for name, floor in floors.items():
            floor_times[name].append(_timed(floor))
        call_times.append(_timed(call))
    medians = {name: _median(times) for name, times in floor_times.items()}
    kernel = min(medians, key=medians.__getitem__)
    return Paired(medians[kernel], kernel, _median(call_times), len(call_times))
