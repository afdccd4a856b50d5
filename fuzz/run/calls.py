"""Every call of the function under test, watched: the case it runs on is known before it starts, so a call
that never returns, or kills its process, can still be reported with that case and its snippet.

A `Watcher` decides what watching means. In a worker process (fuzz/run/workers.py) it tells the parent, over
a pipe, that a call starts and ends; the parent kills the worker when a call overruns its time limit, so
a hang in C code is stopped too. In-process (the Python API without workers) it runs the call in a helper
thread and, on timeout, raises CallInterrupted inside that thread: a call looping in Python stops at its next
bytecode, so a later call or cell does not share the process with it. A call blocked in C code cannot be
stopped that way: it is abandoned and keeps its core busy until it returns, and a segfault still takes the
process down (workers avoid both).
"""

from __future__ import annotations

import ctypes
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuzz.judge.verdict import StopsTheCell, carried
from reference.case import Case

# A first torch.compile of the contract (forward and backward, AOT autograd) took 25 to 40 s with an empty
# cache on the 2-core development machine under the load of other jobs; jax.jit's first compile takes a
# few seconds. 120 s leaves room for a slower or busier machine while a real hang still ends in 2 minutes.
DEFAULT_TIMEOUT = 120.0
# How long an interrupted call gets to unwind (its `finally` blocks, a framework's clean-up) before it is
# reported as still running.
INTERRUPT_GRACE = 2.0


@dataclass(frozen=True)
class Call:
    """One call of the function under test: the case it runs on, and for a backward pass its cotangents."""

    case: Case
    cotangents: dict[str, np.ndarray] | None = None

    @property
    def what(self) -> str:
        return "forward" if self.cotangents is None else "forward and backward"


class CallTimedOut(StopsTheCell):
    """A call overran its time limit. A BaseException, so that neither the checks (which make what the call
    raised the function's failure) nor Hypothesis (which would shrink it, one time limit per try) catch
    it: it ends the cell at once, and the cell is failed with this call's case. `stopped`: whether the call
    ended after it was interrupted (else it still runs in an abandoned thread)."""

    def __init__(self, call: Call, seconds: float, stopped: bool = True) -> None:
        super().__init__(f"a call did not return within {seconds:g} s")
        self.call = call
        self.seconds = seconds
        self.stopped = stopped


class CallInterrupted(BaseException):
    """Raised inside a call that overran its time limit, in the thread running it. A BaseException, like
    KeyboardInterrupt, so that the function's own `except Exception` does not swallow it."""


def _interrupt(thread: threading.Thread, inbox: queue.SimpleQueue) -> bool:
    """Stop the call `thread` is running and then the thread itself; True if it ended within INTERRUPT_GRACE.
    CPython raises the exception at the thread's next bytecode: a loop in Python stops, a call blocked in C
    code only when it returns to Python."""
    # The exception first: the thread cannot leave its serving loop before the None below, so the exception lands
    # in the call or in the loop, never in the thread's own shutdown
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(CallInterrupted))
    inbox.put(None)  # once the call ends, its serving thread ends too
    thread.join(INTERRUPT_GRACE)
    return not thread.is_alive()


class Watcher:
    """Runs `thunk`, the call described by `call`. The base class just runs it."""

    def run(self, call: Call, thunk: Callable[[], Any]) -> Any:
        return thunk()


class ThreadWatcher(Watcher):
    """In-process time limit: the calls run, one at a time, in a daemon thread that serves them in turn (a
    thread per call costs about 2 ms of start-up and the frameworks' per-thread set-up, ten times a small call);
    a call that overruns, or that a Ctrl-C leaves, is interrupted (or, stuck in C code, abandoned) with its thread,
    and the next call gets a fresh one."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._inbox: queue.SimpleQueue | None = None  # the serving thread's, None until a call (or after a hang)
        self._thread: threading.Thread | None = None  # the thread serving it

    def _start(self) -> queue.SimpleQueue:
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        serving = threading.Event()

        def serve() -> None:
            try:
                serving.set()  # inside the try: an interrupt of a call that overran a tiny time limit lands here
                while (job := inbox.get()) is not None:
                    thunk, done, outcome = job
                    try:
                        outcome["value"] = thunk()
                    except BaseException as error:  # re-raised in the caller's thread: the call's, whatever it is
                        outcome["error"] = carried(error)
                    done.set()
            except CallInterrupted:  # it landed between calls (the call returned as its time ran out): end here
                pass

        thread = threading.Thread(target=serve, name="lossnorm-fuzz call", daemon=True)
        thread.start()
        serving.wait()
        self._thread = thread
        weakref.finalize(self, inbox.put, None)  # the watcher gone, its idle thread ends
        return inbox

    def _abandon(self) -> bool:
        """Interrupt the running call and leave its thread (a daemon) to end when it can: the next call gets a
        fresh one, and `close` does not wait for this one. True if it ended within INTERRUPT_GRACE."""
        inbox, thread = self._inbox, self._thread
        self._inbox = self._thread = None
        return _interrupt(thread, inbox)

    def close(self) -> None:
        """End the serving thread (a framework can abort the process if one is still alive at exit)."""
        if self._inbox is not None:
            self._inbox.put(None)
            self._thread.join()
        self._inbox = self._thread = None

    def __enter__(self) -> ThreadWatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, call: Call, thunk: Callable[[], Any]) -> Any:
        if self._thread is threading.current_thread():  # a call made by a call runs inside it, as it would unwatched
            return thunk()
        if self._inbox is None:
            self._inbox = self._start()
        done, outcome = threading.Event(), {}
        self._inbox.put((thunk, done, outcome))
        try:
            finished = done.wait(self.timeout)
        except BaseException:  # Ctrl-C while the call runs: the caller stops now, not when a hung call returns
            self._abandon()
            raise
        if not finished:
            raise CallTimedOut(call, self.timeout, stopped=self._abandon())
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]


class WatchedAdapter:
    """A framework adapter that remembers the last case it materialized (the checks materialize a case right
    before calling the function on it) and runs each call, and each VJP, through a Watcher."""

    def __init__(self, adapter: Any, watcher: Watcher, compiled: bool = False) -> None:
        self._adapter = adapter
        self._watcher = watcher
        self._compiled = compiled  # the adapter's compile policy applies to the call (dynamo's is per thread)
        self._case: Case | None = None
        self._busy = False  # the forward call inside a VJP is part of that VJP's call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._adapter, name)

    def materialize(self, case: Case, **options: Any) -> Any:
        self._case = case
        return self._adapter.materialize(case, **options)

    def vjp(self, fn: Callable[..., Any], inputs: Any, cotangents: dict[str, np.ndarray], contract: Any,
            keywords: dict[str, Any] | None = None) -> Any:
        return self.watch(cotangents, lambda: self._adapter.vjp(fn, inputs, cotangents, contract, keywords))

    def watch(self, cotangents: dict[str, np.ndarray] | None, thunk: Callable[[], Any]) -> Any:
        if self._busy or self._case is None:
            return thunk()
        self._busy = True
        case = self._case

        def scoped() -> Any:  # framework settings can be per thread (JAX's x64 is): set where the call runs
            with self._adapter.scope(case, compiled=self._compiled):
                return thunk()

        try:
            return self._watcher.run(Call(case, cotangents), scoped)
        finally:
            self._busy = False


def watched(function: Callable[..., Any], adapter: WatchedAdapter) -> Callable[..., Any]:
    """`function`, each call of it run through the adapter's watcher."""

    def call(*args: Any, **keywords: Any) -> Any:
        return adapter.watch(None, lambda: function(*args, **keywords))

    name = getattr(function, "__name__", None)  # a proxy may answer any attribute, with anything
    call.__name__ = name if isinstance(name, str) else "function"
    return call
