"""Hypothesis' hill climbing on the cells' `target()` scores (each output's err/tol) ends where the cell has failed.

Hypothesis climbs once, half-way through the budget, one climb per label, each to a local maximum. The budget
stops bounding it once a failing example exists (the engine stops counting examples against max_examples then),
and a climb that reaches a failing example goes on from it. Climbing is a way to find a failure: once the cell
has one its verdict is made, and what is left to run is Hypothesis' search for other kinds of failure (its
generation, which ends by its own rules) and the shrink. A cell that never fails is not touched.

That climb is what made a slow function's failing cell slow: a failure found early in a cell of 40 examples was
followed by hundreds of climbing ones before its shrink (docs/measurements.md).

This reaches into Hypothesis' internals (its `Optimiser`: `hill_climb`, and the step that weighs each climbing
example). Where they are not found nothing is changed, and a failing cell only takes longer."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_cell = threading.local()  # the cell this thread runs: Hypothesis runs its engine in the caller's thread


class _StopClimbing(Exception):
    """Raised out of a climb's step once the cell has failed; caught where the climb starts."""


def _cell_failed() -> bool:
    failed = getattr(_cell, "failed", None)
    return failed is not None and failed()


_installing = threading.Lock()


def _install() -> None:
    try:
        from hypothesis.internal.conjecture.optimiser import Optimiser
    except ImportError:
        return
    with _installing:
        # a climb's step: consider_new_data, consider_new_test_data in older Hypothesis; only a climb takes one
        step = next((name for name in ("consider_new_data", "consider_new_test_data") if hasattr(Optimiser, name)),
                    None)
        climb = getattr(Optimiser, "hill_climb", None)
        if climb is None or step is None or getattr(climb, "stops_at_a_failure", False):
            return
        consider = getattr(Optimiser, step)

        def climb_until_a_failure(self, *args, **kwargs):
            if _cell_failed():
                return None
            try:
                return climb(self, *args, **kwargs)
            except _StopClimbing:
                return None

        def consider_until_a_failure(self, *args, **kwargs):
            if _cell_failed():  # the step's example has run; the next would be another climbing one
                raise _StopClimbing
            return consider(self, *args, **kwargs)

        climb_until_a_failure.stops_at_a_failure = True
        Optimiser.hill_climb = climb_until_a_failure
        setattr(Optimiser, step, consider_until_a_failure)


@contextmanager
def climbing_until_a_failure(failed: Callable[[], bool]) -> Iterator[None]:
    """Within: Hypothesis' climbs in this thread end as soon as `failed()` (the cell has a failing example).
    Hypothesis runs elsewhere in the process (other threads, or after this) climb as it always does."""
    _install()
    outer = getattr(_cell, "failed", None)
    _cell.failed = failed
    try:
        yield
    finally:
        _cell.failed = outer
