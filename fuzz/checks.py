"""The checks run on every example: one implementation call judged against the reference.

An exception raised by the implementation is that implementation's failure, reported with its traceback,
never a crash of the harness.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuzz.exact import exact
from impls.case import Case
from impls.frameworks import INPUT_NAMES, Framework, Inputs, InputSnapshot
from reference import OUTPUT_KEYS, Expected
from reference.tolerance import CONTRACT, Precision, Tolerance, error_ratio, tolerance, ulp_error

STRUCTURE = "wrong output structure"
INPUT_MODIFIED = "input modified"
NON_FINITE = "non-finite output"


def out_of_tolerance(name: str) -> str:
    """The failure kind of one output (or gradient) off by more than its tolerance."""
    return f"{name} out of tolerance"


@dataclass(frozen=True)
class Failure:
    """One failed check: its kind (what tells distinct bugs apart in a report) and what was seen."""

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class Verdict:
    """What one example showed: failures (empty when it conforms), the worst err/tol per output and the
    worst error in units in the last place of the output dtype."""

    failures: list[Failure] = field(default_factory=list)
    error_ratios: dict[str, float] = field(default_factory=dict)
    traceback: str | None = None
    case: Case | None = None  # the case to report, when a second call (a relation's) is the one to show
    cotangents: dict[str, np.ndarray] | None = None  # set by gradient checks
    ulps: float = 0.0
    deterministic: bool | None = None  # two calls on the same inputs gave the same bits (None: not tried)

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

    def fail(self, kind: str, message: str) -> None:
        self.failures.append(Failure(kind, message))

    def merge(self, other: Verdict, prefix: str = "") -> None:
        self.failures += [Failure(failure.kind, prefix + failure.message) for failure in other.failures]
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


def call_safely(fn: Callable[..., Any], *args: Any) -> tuple[Any, Verdict]:
    """fn(*args), or None and a Verdict holding the exception and its traceback."""
    try:
        return fn(*args), Verdict()
    except (Exception, SystemExit) as error:  # the implementation's failure, not the harness's
        verdict = Verdict()
        verdict.fail(f"raised {type(error).__name__}", f"raised {type(error).__name__}: {error}".strip())
        verdict.traceback = traceback.format_exc()
        return None, verdict


def check_output_structure(outputs: Any, adapter: Framework, case: Case) -> Verdict:
    """Output is a dict of the framework's arrays, in the case's dtype, on its device, with the right shapes."""
    verdict = Verdict()
    if not isinstance(outputs, dict):
        verdict.fail(STRUCTURE, f"returned {type(outputs).__name__}, expected a dict with keys {OUTPUT_KEYS}")
        return verdict
    batch, _ = case.shape
    for key, shape in zip(OUTPUT_KEYS, [(batch,), (batch,), ()]):
        if key not in outputs:
            verdict.fail(STRUCTURE, f"output {key!r} is missing")
            continue
        value = outputs[key]
        if not adapter.is_array(value):
            verdict.fail(STRUCTURE, f"{key} is a {type(value).__name__}, not a {adapter.array_type}")
            continue
        if adapter.dtype_of(value) != case.dtype:
            verdict.fail(STRUCTURE, f"{key} has dtype {adapter.dtype_of(value)}, expected {case.dtype}")
        if adapter.device_of(value) != case.device:
            verdict.fail(STRUCTURE, f"{key} is on {adapter.device_of(value)}, expected {case.device}")
        if tuple(value.shape) != shape:
            verdict.fail(STRUCTURE, f"{key} has shape {tuple(value.shape)}, expected {shape}")
    return verdict


def compare_values(got: dict[str, np.ndarray], expected: Expected, tol: Tolerance, dtype: str) -> Verdict:
    """Values within the tolerance model, and finite wherever the reference is."""
    verdict = Verdict()
    counts = np.maximum(expected.selected_counts, 1)
    scales = {"sequence_summed": expected.absolute_row_sums, "token_averaged": expected.absolute_row_sums / counts,
              "magnitude_ratio": 0.0}  # the magnitudes the sums work at (see ulp_error)
    for key, want in expected.outputs().items():
        value = np.asarray(got[key], dtype=np.float64)
        if not np.isfinite(value).all():
            verdict.fail(NON_FINITE, f"{key} is not finite: {np.array2string(value, threshold=8)}")
        ratios = error_ratio(value, want, tol.as_dict()[key])
        verdict.error_ratios[key] = float(np.max(ratios, initial=0.0))
        verdict.ulps = max(verdict.ulps, float(np.max(ulp_error(value, want, dtype, scales[key]), initial=0.0)))
        if verdict.error_ratios[key] > 1:
            where = int(np.argmax(ratios)) if ratios.ndim else None
            at = "" if where is None else f"[{where}]"
            got_at, want_at = (value[where], want[where]) if where is not None else (value, want)
            verdict.fail(
                out_of_tolerance(key),
                f"{key}{at} = {float(got_at)!r}, expected {float(want_at)!r} "
                f"(err/tol = {verdict.error_ratios[key]:.3g}, tol = {float(tol.as_dict()[key].flat[where or 0]):.3g})"
            )
    return verdict


def modified_inputs(adapter: Framework, inputs: Inputs, before: InputSnapshot) -> list[str]:
    """What the call did to its inputs, judged from the adapter's snapshots before and after: a changed
    value, or (where the framework counts writes) a write even of equal values."""
    after = adapter.snapshot(inputs)
    changed = []
    for index, name in enumerate(INPUT_NAMES):
        if not np.array_equal(after.values[index], before.values[index], equal_nan=True):
            changed.append(f"{name} was modified in place")
        elif before.write_counts is not None and after.write_counts[index] != before.write_counts[index]:
            changed.append(f"{name} was written in place (its version counter moved)")
    return changed


def _read_back(outputs: Any, adapter: Framework) -> dict[str, np.ndarray]:
    return {key: adapter.to_float64(outputs[key]).reshape(-1 if key != "magnitude_ratio" else ())
            for key in OUTPUT_KEYS}


def run_case(fn: Callable[..., Any], adapter: Framework, case: Case,
             repeat: bool = False) -> tuple[dict[str, np.ndarray] | None, Verdict]:
    """Call fn on the case's native inputs; check structure and that inputs were not modified. With
    `repeat`, call it a second time on the same inputs and record whether the bits are the same (a fact for
    the report, not a failure: kernels with atomics are not deterministic).

    Returns the outputs read back as float64 (None if unusable) and the verdict so far."""
    inputs = adapter.materialize(case)
    snapshot = adapter.snapshot(inputs)
    outputs, verdict = call_safely(fn, *inputs)
    if not verdict.ok:
        return None, verdict
    verdict.merge(check_output_structure(outputs, adapter, case))
    for change in modified_inputs(adapter, inputs, snapshot):
        verdict.fail(INPUT_MODIFIED, change)
    if not isinstance(outputs, dict) or not all(key in outputs and adapter.is_array(outputs[key])
                                                for key in OUTPUT_KEYS):
        return None, verdict
    try:
        values = _read_back(outputs, adapter)
    except Exception as error:  # e.g. a wrong number of elements
        verdict.fail(STRUCTURE, f"outputs cannot be read back: {type(error).__name__}: {error}")
        return None, verdict
    if any(values[key].shape != want for key, want in
           zip(OUTPUT_KEYS, [(case.shape[0],), (case.shape[0],), ()])):
        return None, verdict
    if repeat and verdict.ok:
        again, second = call_safely(fn, *inputs)
        if not second.ok:
            verdict.merge(second, prefix="second call on the same inputs: ")
        else:
            try:
                verdict.deterministic = same_bits(values, _read_back(again, adapter))
            except Exception:  # a second call that returns something else entirely: not the same bits
                verdict.deterministic = False
    return values, verdict


def check_forward_values(
    fn: Callable[..., Any], adapter: Framework, case: Case, precision: Precision = CONTRACT, repeat: bool = False
) -> tuple[dict[str, np.ndarray] | None, Verdict]:
    """The forward pass against the reference: structure, dtypes, devices, finiteness, values, inputs
    (and, with `repeat`, determinism). Also returns the outputs read back as float64 (None if unusable)."""
    values, verdict = run_case(fn, adapter, case, repeat)
    if values is not None:
        expected = exact(case)
        verdict.merge(compare_values(values, expected, tolerance(expected, case.dtype, precision), case.dtype))
    return values, verdict


def check_forward(fn: Callable[..., Any], adapter: Framework, case: Case, precision: Precision = CONTRACT) -> Verdict:
    return check_forward_values(fn, adapter, case, precision)[1]
