"""A user's own function as a benchmark row (`python -m bench --target path/to/file.py:fn --framework torch`):
loaded and run as `python -m fuzz check` runs it (the same TARGET, `--framework` modes and declared contract, so
`torch-compile` and `jax` time it compiled), checked against the exact reference under the contract's
tolerance before anything is timed, and timed next to the floor and the built-ins of its contract in one run."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from impls.frameworks import Framework, check_modes, load_framework
from reference.case import Case
from reference.contract import Contract
from reference.tolerance import Precision

# The subject of a user's row in bench/plan.py's Target (one run times at most one user function): no built-in
# has this name, and the row's id stays readable ("reduction-cpu-float32-large-target").
USER_ROW = "target"


@dataclass(frozen=True)
class UserRow:
    """What the timing needs of the user's function: its call on the contract's inputs, its adapter, its bound
    contract and its compiled-graph counter; and its first call checked as `check` checks a call."""

    name: str  # as the table shows it: "my_loss.py:agg_loss (torch-compile)"
    adapter: Framework
    function: Callable[..., Any]
    contract: Contract
    compiled: bool
    subject: Any  # fuzz.judge.subject.Subject: the function as the fuzzer runs it

    def __call__(self, *arrays: Any) -> Any:
        return self.function(*arrays)

    def compile_counter(self) -> Callable[[], int]:
        return self.adapter.compile_counter(self.function)

    def first_call_failures(self, case: Case, precision: Precision, timeout: float) -> tuple[list[str], bool]:
        """What is wrong with the function's answer on the row's case, as `check` says it (what it returns, its
        dtype, device and shape, what it raised, its value), from a call that overruns `timeout` seconds (a compile
        included) interrupted: a function that raises, hangs or returns no array is told so, never timed, and never
        the benchmark's own crash or hang. Also whether the call still runs: one stuck in C code cannot be
        interrupted, and keeps running in this process."""
        from fuzz.judge.forward import check_forward
        from fuzz.run.calls import CallTimedOut, ThreadWatcher
        from fuzz.run.subjects import watch_subject

        with ThreadWatcher(timeout) as watcher:
            watched = watch_subject(self.subject, watcher)
            try:
                verdict = check_forward(watched.function, watched.adapter, case, precision)
            except CallTimedOut as stopped:
                return [f"{stopped}" + ("" if stopped.stopped else " (it could not be stopped, and still runs)")], \
                    not stopped.stopped
        return [str(failure) for failure in verdict.failures], False


def row_name(target: str, framework: str) -> str:
    """A TARGET as a table row names it: a file by its base name (the folders would fill the column)."""
    location, _, function = target.rpartition(":")
    shown = os.path.basename(location) if location.endswith(".py") else location
    return f"{shown}:{function} ({framework})"


def framework_of(framework: str) -> Framework:
    """The adapter a `--framework` mode runs under (torch-compile: torch)."""
    return load_framework(check_modes()[framework][0])


def user_row(target: str, framework: str, contract: str, parameters: dict[str, Any],
             masked_values: str = "any") -> UserRow:
    """The user's function as a row; fuzz.loader.LoadError (or CallShapeError) where it cannot be loaded or cannot
    take the contract's call, as `check` says it."""
    from fuzz.run.subjects import SubjectSpec, build_subject

    # once per process, as the fuzzer builds a subject: every row of the run times one loaded (and compiled) function
    subject = build_subject(SubjectSpec.of(target, framework, contract=contract, parameters=parameters,
                                           masked_values=masked_values))
    return UserRow(row_name(target, framework), subject.adapter, subject.function, subject.contract,
                   subject.compiled, subject)
