"""Hypothesis' hill climbing on the cells' `target()` scores (each output's err/tol), kept within the cell's budget.

Hypothesis climbs from the best example of each label, each climb to a local maximum: for budgets under 1000
once, half-way through the budget; from 1000 on, in passes between generation. Until a failing example exists,
the budget bounds it, as it bounds everything (the engine ends the run at `max_examples` passing examples). Once
one exists the engine stops counting, and the climb goes on past the budget, from the failing example too: a
failure found early in a cell of 40 examples was followed by hundreds of climbing ones before its shrink
(docs/measurements.md), minutes for a slow function. `fuzz_cell` ends the climb where its budget of drawn
examples is spent, failing ones included; the shrink comes after, as before. A cell that never fails is not
touched.

This reaches into Hypothesis' internals (its `Optimiser`: `run`, `hill_climb`, and `consider_new_data`, the step
that weighs each climbing example). Where they are not found nothing is changed, and a failing cell only takes
longer."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_cell = threading.local()  # the cell this thread runs: Hypothesis runs its engine in the caller's thread
_installing = threading.Lock()


class _StopClimbing(Exception):
    """Raised out of a climb's step once the cell's climb must end; caught where the climb starts."""


def _must_stop() -> bool:
    stop = getattr(_cell, "stop", None)
    return stop is not None and stop()


def _ending_here(method: Callable[..., Any]) -> Callable[..., Any]:
    """A climb's entry point that does not start once the climb must end, and ends where a step says so."""

    @functools.wraps(method)
    def climb(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _must_stop():
            return None
        try:
            return method(self, *args, **kwargs)
        except _StopClimbing:
            return None

    return climb


def _install() -> None:
    try:
        from hypothesis.internal.conjecture.optimiser import Optimiser
    except ImportError:
        return
    with _installing:
        methods = [getattr(Optimiser, name, None) for name in ("run", "hill_climb", "consider_new_data")]
        run, hill_climb, step = methods
        if None in methods or hasattr(step, "__wrapped__"):  # not this Hypothesis, or installed already
            return

        @functools.wraps(step)
        def step_or_stop(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _must_stop():  # the step's example has run; the next one would be another climbing example
                raise _StopClimbing
            return step(self, *args, **kwargs)

        # the engine calls `run`, which calls `hill_climb`: both catch, so the step's exception never leaves them
        Optimiser.run, Optimiser.hill_climb = _ending_here(run), _ending_here(hill_climb)
        Optimiser.consider_new_data = step_or_stop


@contextmanager
def climbing_until(stop: Callable[[], bool]) -> Iterator[None]:
    """Within: Hypothesis' climbs in this thread end as soon as `stop()`. Hypothesis runs elsewhere in the process
    (other threads, or after this) climb as they always do."""
    _install()
    outer = getattr(_cell, "stop", None)
    _cell.stop = stop
    try:
        yield
    finally:
        _cell.stop = outer
