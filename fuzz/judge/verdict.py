"""What one call showed: a Verdict holds the Failures of the checks that failed (each with its kind, what
tells distinct bugs apart), the worst err/tol per compared value, ulps and determinism.

An exception raised by the function under test is that function's failure, with its traceback, never a
crash of the harness (`call_safely`): SystemExit, KeyboardInterrupt and a user's own BaseException included."""

from __future__ import annotations

import functools
import inspect
import os
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reference.case import Case

STRUCTURE = "wrong output structure"
INPUT_MODIFIED = "input modified"
NON_FINITE = "non-finite output"
FORWARD_OVERFLOW = "forward overflowed the dtype"


def out_of_tolerance(name: str) -> str:
    """The failure kind of one output (or gradient) off by more than its tolerance."""
    return f"{name} out of tolerance"


@dataclass(frozen=True)
class Failure:
    """One failed check: its kind (what tells distinct bugs apart in a report) and what was seen."""

    kind: str
    message: str
    hint: str | None = None  # the contract's explanation the message ends with, where it named a mistake

    def __str__(self) -> str:
        return self.message


@dataclass
class Verdict:
    """What one example showed: failures (empty when it conforms), the worst err/tol per output and the
    worst error in units in the last place of the input dtype."""

    failures: list[Failure] = field(default_factory=list)
    error_ratios: dict[str, float] = field(default_factory=dict)
    traceback: str | None = None
    case: Case | None = None  # the case to report, when a second call (a relation's) is the one to show
    cotangents: dict[str, np.ndarray] | None = None  # set by gradient checks
    ulps: float = 0.0
    deterministic: bool | None = None  # two calls on the same inputs gave the same bits (None: not tried)
    # Where an exception passed on its way out, (file, function) per frame: a gradient check calls the function
    # and its backward in one go, and these tell which of the two raised.
    raised_through: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def worst(self) -> float:
        return max(self.error_ratios.values(), default=0.0)

    @property
    def kind(self) -> str:
        """The failure kind this example stands for: the first check that failed (checks run simplest first)."""
        return self.failures[0].kind if self.failures else ""

    def fail(self, kind: str, message: str, hint: str | None = None) -> None:
        self.failures.append(Failure(kind, message, hint))

    def merge(self, other: Verdict, prefix: str = "") -> None:
        self.failures += [Failure(failure.kind, prefix + failure.message, failure.hint) for failure in other.failures]
        for key, value in other.error_ratios.items():
            self.error_ratios[prefix + key] = max(value, self.error_ratios.get(prefix + key, 0.0))
        self.traceback = self.traceback or other.traceback
        self.case = self.case or other.case
        self.ulps = max(self.ulps, other.ulps)
        if other.deterministic is not None:
            self.deterministic = other.deterministic and self.deterministic is not False


def same_bits(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> bool:
    """Whether two sets of results read back as float64 are the same values, signs of zeros and NaNs included
    (a float64 holds every value of the narrower dtypes exactly)."""
    return all(np.array_equal(first[key], second[key], equal_nan=True)
               and np.array_equal(np.signbit(first[key]), np.signbit(second[key])) for key in first)


class StopsTheCell(BaseException):
    """Raised by the harness, inside a call, to end the cell at once (a call overran its time limit): never the
    function's failure."""


class RaisedByFunction(Exception):
    """A BaseException other than an Exception or SystemExit (KeyboardInterrupt, a user's own subclass) that the
    function under test raised in a helper thread (fuzz/run/calls.py), re-raised in the caller's thread as this:
    there a bare KeyboardInterrupt could be the user's Ctrl-C, which must stop the run."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def carried(error: BaseException) -> BaseException:
    """What a helper thread's call raised, as its caller's thread re-raises it."""
    return error if isinstance(error, Exception | SystemExit | StopsTheCell) else RaisedByFunction(error)


def _may_be_a_ctrl_c(error: BaseException) -> bool:
    """Whether `error` could be the user's Ctrl-C rather than the function's own: a KeyboardInterrupt where
    Python's SIGINT handler raises one (the main thread; worker and rank processes ignore SIGINT)."""
    return (isinstance(error, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)


def call_safely(fn: Callable[..., Any], *args: Any) -> tuple[Any, Verdict]:
    """fn(*args), or None and a Verdict holding the exception and its traceback."""
    try:
        return fn(*args), Verdict()
    except RaisedByFunction as raised:
        return None, _raised(raised.error, _from_the_function_on(raised.error))
    except BaseException as error:  # the implementation's failure, not the harness's
        if isinstance(error, StopsTheCell) or _may_be_a_ctrl_c(error):
            raise
        return None, _raised(error, _from_the_function_on(error))


# The suite's own calling frames (the judge, the call's thread and watcher, the framework adapters' wrappers):
# a traceback starts at the first frame after them, where the function under test (or its framework) begins.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CALLING_FOLDERS = (os.path.join(_ROOT, "fuzz", ""), os.path.join(_ROOT, "impls", "frameworks", ""))


def _from_the_function_on(error: BaseException) -> str:
    """`error`'s traceback from the first frame outside the suite's calling code; whole where every frame is the
    suite's (an error of the suite itself, to report whole)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_CALLING_FOLDERS):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb or error.__traceback__))


def _raised(error: BaseException, formatted: str) -> Verdict:
    verdict = Verdict()
    verdict.fail(f"raised {type(error).__name__}", f"raised {type(error).__name__}: {error}".strip())
    verdict.traceback = formatted
    verdict.raised_through = tuple((frame.f_code.co_filename, frame.f_code.co_name)
                                   for frame, _ in traceback.walk_tb(error.__traceback__))
    return verdict


def raised_calling(verdict: Verdict, fn: Callable[..., Any]) -> bool:
    """Whether the exception in `verdict` came out of a call of `fn` (its frame is on the way out), rather than
    from what ran after it returned (a call whose frame a compiler left off the traceback reads as after). `fn`
    may be wrapped (`jax.jit`, `functools.wraps`, `functools.partial`): its innermost function's frame counts."""
    code = getattr(_innermost(fn), "__code__", None)
    return code is not None and (code.co_filename, code.co_name) in verdict.raised_through


def _innermost(fn: Any) -> Any:
    """The function a wrapper calls in the end: through `__wrapped__` (jax.jit, custom_vjp, functools.wraps; a chain
    that cycles stops where it is) and `functools.partial`'s `func`."""
    while True:
        try:
            fn = inspect.unwrap(fn)
        except ValueError:
            return fn
        if not isinstance(fn, functools.partial):
            return fn
        fn = fn.func


def named_by_forward_alone(verdict: Verdict, function: Callable[..., Any],
                           forward_alone: Callable[[], Verdict]) -> Verdict:
    """The failing verdict of a forward and backward run in one go, each failure named by the pass that raised it:
    the forward's as the forward cell names it (the same bug there), anything else "backward ...". A forward is one
    whose exception came out of `function`'s own frame and which the forward run alone (`forward_alone`, called
    only then) raises too: a compiler that traces the backward while the function is being called (torch.compile's
    AOTAutograd) raises a backward's error from that frame as well."""
    if raised_calling(verdict, function) and forward_alone().kind == verdict.kind:
        return verdict
    return all_backward(verdict)


def all_backward(verdict: Verdict) -> Verdict:
    """Every failure of `verdict` named as the backward pass's, in place."""
    failed, verdict.failures = verdict.failures, []
    for failure in failed:
        verdict.fail(f"backward {failure.kind}", f"backward {failure.message}")
    return verdict
