"""A cell's result: one (subject, device, check, dtype) under Hypothesis, with every distinct bug it found; and
what one distinct bug is, across cells, for every report (`bug_keys`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reference.case import Case
from reference.tolerance import CONTRACT

FIXED_CASE = "fixed case"  # the story's label naming a fixed case (fuzz.judge.anchors): checked as it is, not shrunk


# A split in a row's name: a mesh (data x sequence, "2x2") or R ranks by G micro-batches ("R2xG1"), fuzz/engines.
_SPLIT = re.compile(r"^(?:\d+x\d+|R\d+xG\d+)$")
_PASSES = ("forward", "gradients")


def engine_of(check: str) -> str:
    """The engine a cell's check ran on, its row's name without the split and the pass: "" in process
    ("forward", "gradients"), else the engine's kind ("sharded 2x2 gradients" -> "sharded", "shard_map ranks
    R2xG1" -> "shard_map ranks")."""
    return " ".join(word for word in check.split() if word not in _PASSES and not _SPLIT.match(word))


def split_of(check: str) -> str:
    """The split a cell's check ran on: "2x2" (a mesh), "R2xG1" (ranks by micro-batches), "" in process."""
    return next((word for word in check.split() if _SPLIT.match(word)), "")


def pass_of(check: str) -> str:
    """"gradients" for a gradient check, else "forward"."""
    return "gradients" if check.split()[-1:] == ["gradients"] else "forward"


def split_and_pass(check: str) -> str:
    """What tells a cell's check apart from the others on its engine: "forward", "gradients", "2x2", "R2xG1
    gradients"."""
    return " ".join(word for word in check.split() if word in _PASSES or _SPLIT.match(word))


OUT_OF_TOLERANCE = " out of tolerance"  # the end of every value kind: "<output> ...", "d <input> ..."

BugKey = tuple[str, str, str, str]
T = TypeVar("T")


def bug_key(implementation: str, contract: str, check: str, kind: str) -> BugKey:
    """One kind of failure of one implementation under one bound contract on one engine (or in process), wherever
    it shows: every device and dtype, every split of the engine, the forward and the gradient check alike. A
    gradient check names what its forward raised as the forward check does (fuzz/judge/verdict.py,
    `named_by_forward_alone`) and what only its backward raised by a kind of its own (`backward raised ...`), so
    one kind in both checks is one bug. `bug_keys` also joins a wrong gradient to its wrong output."""
    return implementation, contract, engine_of(check), kind


def bug_keys(occurrences: Iterable[tuple[str, str, str, str]]) -> Callable[[str, str, str, str], BugKey]:
    """What makes one distinct bug, as every report counts and groups them, given every (implementation, contract,
    check, kind) of the report: `bug_key`, except that a wrong gradient ("d <input> out of tolerance") is the bug
    of the wrong output of the same implementation, contract and engine where its forward checks show exactly one
    (the gradient of a wrong formula is that formula's: one mistake, found by both checks). Where they show none
    (only the backward is wrong) or several (outputs wrong in several ways), it stays a bug of its own."""
    forward_values: dict[tuple[str, str, str], set[str]] = {}
    for implementation, contract, check, kind in occurrences:
        if pass_of(check) == "forward" and kind.endswith(OUT_OF_TOLERANCE):
            forward_values.setdefault((implementation, contract, engine_of(check)), set()).add(kind)

    def key(implementation: str, contract: str, check: str, kind: str) -> BugKey:
        found = bug_key(implementation, contract, check, kind)
        if pass_of(check) == "gradients" and kind.startswith("d ") and kind.endswith(OUT_OF_TOLERANCE):
            outputs = forward_values.get(found[:3], set())
            if len(outputs) == 1:
                return (*found[:3], next(iter(outputs)))
        return found

    return key


def one_per_cell(occurrences: Iterable[T], cell: Callable[[T], Hashable]) -> list[T]:
    """A bug's occurrences, the first of each cell only: a gradient cell can show one wrong output's bug through
    two inputs (`bug_keys`), and it is one more cell of that bug, not two."""
    seen: set[Hashable] = set()
    kept = []
    for occurrence in occurrences:
        if (where := cell(occurrence)) not in seen:
            seen.add(where)
            kept.append(occurrence)
    return kept


def case_title(labels: Iterable[str]) -> str:
    """What a report calls a bug's case, from its story's labels: a fixed case is no minimal case."""
    return "case" if FIXED_CASE in labels else "minimal case"


@dataclass
class Bug:
    """One distinct kind of failure of a cell, shrunk on its own (or a fixed case that failed, as it is)."""

    kind: str
    failures: list[str]  # every check that failed on its minimal case
    case: Case
    snippet: str
    traceback: str | None = None

    @property
    def story(self) -> tuple[tuple[str, object], ...]:
        return self.case.story

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "failures": self.failures,
                "counterexample": {k: repr(v) for k, v in self.story} or None,
                "snippet": self.snippet, "traceback": self.traceback}


@dataclass
class CellResult:
    subject: str
    device: str
    dtype: str
    check: str  # "forward", "gradients", or a sharded row ("sharded 2x2 gradients")
    examples: int = 0
    worst: float = 0.0
    worst_ulps: float = 0.0  # the worst error in units in the last place of the input dtype
    deterministic: bool | None = None  # every example's two calls gave the same bits (None: not tried)
    seconds: float = 0.0
    layouts: tuple[str, ...] = ()
    bugs: list[Bug] = field(default_factory=list)  # simplest first
    problems: list[str] = field(default_factory=list)  # failures with no case to show (a worker died)
    applicable: bool = True  # False: e.g. gradients of NumPy, which has no autograd ("n/a")
    precision: str = CONTRACT.name
    contract: str = "magnitude"  # the contract and its declared parameters, as a label

    @property
    def ok(self) -> bool:
        return not self.bugs and not self.problems

    @property
    def failures(self) -> list[str]:
        """Every failure message: the cell's problems, then each bug's, simplest bug first."""
        return [*self.problems, *(failure for bug in self.bugs for failure in bug.failures)]

    @property
    def snippet(self) -> str | None:
        return self.bugs[0].snippet if self.bugs else None

    @property
    def story(self) -> tuple[tuple[str, object], ...]:
        return self.bugs[0].story if self.bugs else ()

    @property
    def traceback(self) -> str | None:
        return self.bugs[0].traceback if self.bugs else None

    def as_json(self) -> dict[str, Any]:
        return {
            "implementation": self.subject, "contract": self.contract, "device": self.device, "dtype": self.dtype,
            "check": self.check, "engine": engine_of(self.check), "split": split_of(self.check),
            "pass": pass_of(self.check), "ok": self.ok, "applicable": self.applicable, "examples": self.examples,
            "precision": self.precision, "worst_error_over_tolerance": self.worst, "worst_ulps": self.worst_ulps,
            "deterministic": self.deterministic,
            "seconds": round(self.seconds, 3), "layouts": list(self.layouts), "failures": self.failures,
            "bugs": [bug.as_json() for bug in self.bugs],
            "counterexample": dict((k, repr(v)) for k, v in self.story) if self.story else None,
            "snippet": self.snippet, "traceback": self.traceback,
        }
