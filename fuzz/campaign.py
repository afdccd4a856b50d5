"""Run Hypothesis over one target (an implementation on one device in one dtype) and keep the result:
examples run, worst err/tol and ulps, and every distinct kind of failure, each shrunk on its own with its
snippet.

Distinct bugs: each example that fails raises an exception whose type stands for its failure kind (the
first check that failed), so Hypothesis' report_multiple_bugs tells the kinds apart, shrinks each to its
own minimal case and reports them simplest first."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from fuzz.checks import Verdict, check_forward_values
from fuzz.exact import exact
from fuzz.metamorphic import RELATIONS, check_ratio_bounds, check_relation
from fuzz.snippet import render_snippet
from fuzz.strategies import choice, draw_case
from impls.case import Case
from impls.frameworks import Framework
from reference import vjp
from reference.tolerance import CONTRACT, Precision, gradient_tolerance, tolerance

TARGET_CAP = 1e6  # hypothesis.target needs finite scores; anything above 1 is a failure anyway


@dataclass
class Subject:
    """What is fuzzed: a function with the contract's signature, and how to build its inputs."""

    name: str
    function: Callable[..., Any]
    adapter: Framework
    import_lines: tuple[str, ...]
    function_name: str
    wrap: str | None = None  # the compiled mode's wrapping as Python ("jax.jit({})"), for the snippet
    precision: Precision = CONTRACT  # what it is held to: the contract, or the built-ins' strict promise
    compiled: bool = False  # runs compiled code: the adapter's compile policy applies while it is called
    differentiable: bool | None = None  # None: as its framework (the registry may say otherwise)
    dtypes: tuple[str, ...] | None = None  # None: its framework's

    @property
    def has_gradients(self) -> bool:
        return self.adapter.differentiable if self.differentiable is None else self.differentiable

    @property
    def supported_dtypes(self) -> tuple[str, ...]:
        return self.adapter.dtypes if self.dtypes is None else self.dtypes


@dataclass
class Counterexample(Exception):
    case: Case
    verdict: Verdict


_KIND_TYPES: dict[str, type[Counterexample]] = {}


def counterexample_of_kind(kind: str) -> type[Counterexample]:
    """A Counterexample subclass per failure kind: Hypothesis tells bugs apart by exception type and place."""
    if kind not in _KIND_TYPES:
        _KIND_TYPES[kind] = type(f"Counterexample[{kind}]", (Counterexample,), {})
    return _KIND_TYPES[kind]


@dataclass
class Bug:
    """One distinct kind of failure of a cell, shrunk on its own."""

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
    check: str  # "forward" or "gradients"
    examples: int = 0
    worst: float = 0.0
    worst_ulps: float = 0.0  # the worst error in units in the last place of the output dtype
    deterministic: bool | None = None  # every example's two calls gave the same bits (None: not tried)
    seconds: float = 0.0
    layouts: tuple[str, ...] = ()
    bugs: list[Bug] = field(default_factory=list)  # simplest first
    problems: list[str] = field(default_factory=list)  # failures with no case to show (a worker died)
    applicable: bool = True  # False: e.g. gradients of NumPy, which has no autograd ("n/a")
    precision: str = CONTRACT.name

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
            "implementation": self.subject, "device": self.device, "dtype": self.dtype, "check": self.check,
            "ok": self.ok, "applicable": self.applicable, "examples": self.examples, "precision": self.precision,
            "worst_error_over_tolerance": self.worst, "worst_ulps": self.worst_ulps,
            "deterministic": self.deterministic,
            "seconds": round(self.seconds, 3), "layouts": list(self.layouts), "failures": self.failures,
            "bugs": [bug.as_json() for bug in self.bugs],
            "counterexample": dict((k, repr(v)) for k, v in self.story) if self.story else None,
            "snippet": self.snippet, "traceback": self.traceback,
        }


def check_example(subject: Subject, case: Case, relation: str | None) -> Verdict:
    """Every forward check on one case: reference, structure, inputs, ratio bounds, one relation."""
    with subject.adapter.scope(case, compiled=subject.compiled):
        values, verdict = check_forward_values(subject.function, subject.adapter, case, subject.precision,
                                               repeat=True)
        if verdict.ok and relation is not None and values is not None:
            verdict.merge(check_ratio_bounds(case, values, subject.precision))
            verdict.merge(check_relation(relation, subject.function, subject.adapter, case, values,
                                         subject.precision))
    return verdict


def _counterexamples(error: BaseException) -> list[Counterexample]:
    """Every Counterexample in what Hypothesis raised (one, a group of distinct bugs, or flaky groups)."""
    if isinstance(error, Counterexample):
        return [error]
    found = [inner for group in getattr(error, "exceptions", ()) for inner in _counterexamples(group)]
    if not found and error.__cause__ is not None:
        found = _counterexamples(error.__cause__)
    return found


def hypothesis_settings(max_examples: int, *, derandomize: bool = False) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),
        report_multiple_bugs=True,
    )


def fuzz_cell(
    subject: Subject,
    *,
    dtype: str,
    device: str,
    layouts: Sequence[str],
    max_examples: int,
    seed: int,
    check: str = "forward",
    example_check: Callable[[Subject, Case, Any], Verdict] | None = None,
) -> CellResult:
    """Fuzz one (subject, device, dtype) cell; shrink and render the first counterexample found."""
    result = CellResult(subject.name, device, dtype, check, layouts=tuple(layouts), precision=subject.precision.name)
    started = time.perf_counter()

    @hypothesis_seed(seed)
    @hypothesis_settings(max_examples)
    @given(st.data())
    def property_holds(data: st.DataObject) -> None:
        case = draw_case(lambda strategy, label: data.draw(strategy, label=label),
                         dtypes=[dtype], layouts=layouts, devices=[device])
        if example_check is None:
            relation = data.draw(choice(RELATIONS), label="metamorphic relation")
            verdict = check_example(subject, case, relation)
        else:
            verdict = example_check(subject, case, data)
        result.examples += 1
        result.worst = max(result.worst, min(verdict.worst, TARGET_CAP))
        result.worst_ulps = max(result.worst_ulps, verdict.ulps)
        if verdict.deterministic is not None:
            result.deterministic = verdict.deterministic and result.deterministic is not False
        for label, ratio in verdict.error_ratios.items():
            target(min(ratio, TARGET_CAP), label=label)
        if not verdict.ok:
            raise counterexample_of_kind(verdict.kind)(verdict.case or case, verdict)

    try:
        property_holds()
    except Exception as error:
        found = _counterexamples(error)
        if not found:
            raise
        kinds = dict.fromkeys(found_one.verdict.kind for found_one in found)  # Hypothesis' order: simplest first
        result.bugs = [_bug(subject, next(f for f in found if f.verdict.kind == kind)) for kind in kinds]
    result.seconds = time.perf_counter() - started
    return result


def _bug(subject: Subject, found: Counterexample) -> Bug:
    """A shrunk counterexample as a reported bug, with the snippet that reproduces it."""
    case, verdict = found.case, found.verdict
    expected = exact(case)
    gradient_parts = {}
    if verdict.cotangents is not None:
        gradients = vjp(case.token_log_probs, case.advantages, case.token_mask, verdict.cotangents, expected)
        gradient_parts = {"cotangents": verdict.cotangents, "gradients": gradients,
                          "gradient_tol": gradient_tolerance(gradients, verdict.cotangents, case.dtype,
                                                             subject.precision)}
    failures = [str(failure) for failure in verdict.failures]
    snippet = render_snippet(
        case=case, framework=subject.adapter.name, import_lines=subject.import_lines,
        function_name=subject.function_name, wrap=subject.wrap, expected=expected,
        tol=tolerance(expected, case.dtype, subject.precision), failures=failures, **gradient_parts,
    )
    return Bug(verdict.kind, failures, case, snippet, verdict.traceback)
