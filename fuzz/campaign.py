"""Run Hypothesis over one target (an implementation on one device in one dtype) and keep the result:
examples run, worst err/tol, or the shrunk counterexample with its snippet."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from fuzz.checks import Verdict, check_forward_values
from fuzz.metamorphic import RELATIONS, check_ratio_bounds, check_relation
from fuzz.snippet import render_snippet
from fuzz.strategies import draw_case
from fuzz.tolerance import gradient_tolerance, tolerance
from impls.case import Case
from impls.frameworks import Framework
from reference import reference, vjp

TARGET_CAP = 1e6  # hypothesis.target needs finite scores; anything above 1 is a failure anyway


@dataclass
class Subject:
    """What is fuzzed: a function with the contract's signature, and how to build its inputs."""

    name: str
    function: Callable[..., Any]
    adapter: Framework
    import_lines: tuple[str, ...]
    function_name: str
    wrap: str | None = None  # "torch.compile" or "jax.jit" when the snippet must wrap the function


@dataclass
class Counterexample(Exception):
    case: Case
    verdict: Verdict


@dataclass
class CellResult:
    subject: str
    device: str
    dtype: str
    check: str  # "forward" or "gradients"
    examples: int = 0
    worst: float = 0.0
    seconds: float = 0.0
    layouts: tuple[str, ...] = ()
    failures: list[str] = field(default_factory=list)
    snippet: str | None = None
    story: tuple[tuple[str, object], ...] = ()
    traceback: str | None = None
    applicable: bool = True  # False: e.g. gradients of NumPy, which has no autograd ("n/a")

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        return {
            "implementation": self.subject, "device": self.device, "dtype": self.dtype, "check": self.check,
            "ok": self.ok, "applicable": self.applicable, "examples": self.examples,
            "worst_error_over_tolerance": self.worst,
            "seconds": round(self.seconds, 3), "layouts": list(self.layouts), "failures": self.failures,
            "counterexample": dict((k, repr(v)) for k, v in self.story) if self.story else None,
            "snippet": self.snippet, "traceback": self.traceback,
        }


def check_example(subject: Subject, case: Case, relation: str | None) -> Verdict:
    """Every forward check on one case: reference, structure, inputs, ratio bounds, one relation."""
    values, verdict = check_forward_values(subject.function, subject.adapter, case)
    if verdict.ok and relation is not None and values is not None:
        verdict.merge(check_ratio_bounds(case, values))
        verdict.merge(check_relation(relation, subject.function, subject.adapter, case, values))
    return verdict


def _find_counterexample(error: BaseException) -> Counterexample | None:
    if isinstance(error, Counterexample):
        return error
    for inner in getattr(error, "exceptions", ()):  # Hypothesis' flaky errors are exception groups
        found = _find_counterexample(inner)
        if found:
            return found
    return _find_counterexample(error.__cause__) if error.__cause__ else None


def hypothesis_settings(max_examples: int, *, derandomize: bool = False) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),
        report_multiple_bugs=False,
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
    result = CellResult(subject.name, device, dtype, check, layouts=tuple(layouts))
    started = time.perf_counter()

    @hypothesis_seed(seed)
    @hypothesis_settings(max_examples)
    @given(st.data())
    def property_holds(data: st.DataObject) -> None:
        case = draw_case(lambda strategy, label: data.draw(strategy, label=label),
                         dtypes=[dtype], layouts=layouts, devices=[device])
        if example_check is None:
            relation = data.draw(st.sampled_from(RELATIONS), label="metamorphic relation")
            verdict = check_example(subject, case, relation)
        else:
            verdict = example_check(subject, case, data)
        result.examples += 1
        result.worst = max(result.worst, min(verdict.worst, TARGET_CAP))
        for label, ratio in verdict.error_ratios.items():
            target(min(ratio, TARGET_CAP), label=label)
        if not verdict.ok:
            raise Counterexample(verdict.case or case, verdict)

    try:
        property_holds()
    except Exception as error:
        found = _find_counterexample(error)
        if found is None:
            raise
        case, verdict = found.case, found.verdict
        expected = reference(case.token_log_probs, case.advantages, case.token_mask)
        gradient_parts = {}
        if verdict.cotangents is not None:
            exact = vjp(case.token_log_probs, case.advantages, case.token_mask, verdict.cotangents)
            gradient_parts = {"cotangents": verdict.cotangents, "gradients": exact,
                              "gradient_tol": gradient_tolerance(exact, verdict.cotangents, case.dtype)}
        result.failures = verdict.failures
        result.traceback = verdict.traceback
        result.story = case.story
        result.snippet = render_snippet(
            case=case, framework=subject.adapter.name, import_lines=subject.import_lines,
            function_name=subject.function_name, wrap=subject.wrap, expected=expected,
            tol=tolerance(expected, case.dtype), failures=verdict.failures, **gradient_parts,
        )
    result.seconds = time.perf_counter() - started
    return result
