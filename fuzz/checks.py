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

from fuzz.tolerance import Tolerance, error_ratio, tolerance
from impls.case import Case
from impls.frameworks import Framework
from reference import OUTPUT_KEYS, Expected, reference


@dataclass
class Verdict:
    """What one example showed: failures (empty when it conforms) and the worst err/tol per output."""

    failures: list[str] = field(default_factory=list)
    error_ratios: dict[str, float] = field(default_factory=dict)
    traceback: str | None = None
    case: Case | None = None  # the case to report, when a second call (a relation's) is the one to show
    cotangents: dict[str, np.ndarray] | None = None  # set by gradient checks

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def worst(self) -> float:
        return max(self.error_ratios.values(), default=0.0)

    def merge(self, other: Verdict, prefix: str = "") -> None:
        self.failures += [prefix + failure for failure in other.failures]
        for key, value in other.error_ratios.items():
            self.error_ratios[prefix + key] = max(value, self.error_ratios.get(prefix + key, 0.0))
        self.traceback = self.traceback or other.traceback
        self.case = self.case or other.case


def call_safely(fn: Callable[..., Any], *args: Any) -> tuple[Any, Verdict]:
    """fn(*args), or None and a Verdict holding the exception and its traceback."""
    try:
        return fn(*args), Verdict()
    except (Exception, SystemExit) as error:  # the implementation's failure, not the harness's
        verdict = Verdict([f"raised {type(error).__name__}: {error}".strip()])
        verdict.traceback = traceback.format_exc()
        return None, verdict


def check_output_structure(outputs: Any, adapter: Framework, case: Case) -> Verdict:
    """Output is a dict of the framework's arrays, in the case's dtype, on its device, with the right shapes."""
    verdict = Verdict()
    if not isinstance(outputs, dict):
        verdict.failures.append(f"returned {type(outputs).__name__}, expected a dict with keys {OUTPUT_KEYS}")
        return verdict
    batch, _ = case.shape
    for key, shape in zip(OUTPUT_KEYS, [(batch,), (batch,), ()]):
        if key not in outputs:
            verdict.failures.append(f"output {key!r} is missing")
            continue
        value = outputs[key]
        if not adapter.is_array(value):
            verdict.failures.append(f"{key} is a {type(value).__name__}, not a {adapter.array_type}")
            continue
        if adapter.dtype_of(value) != case.dtype:
            verdict.failures.append(f"{key} has dtype {adapter.dtype_of(value)}, expected {case.dtype}")
        if adapter.device_of(value) != case.device:
            verdict.failures.append(f"{key} is on {adapter.device_of(value)}, expected {case.device}")
        if tuple(value.shape) != shape:
            verdict.failures.append(f"{key} has shape {tuple(value.shape)}, expected {shape}")
    return verdict


def compare_values(got: dict[str, np.ndarray], expected: Expected, tol: Tolerance) -> Verdict:
    """Values within the tolerance model, and finite wherever the reference is."""
    verdict = Verdict()
    for key, want in expected.outputs().items():
        value = np.asarray(got[key], dtype=np.float64)
        if not np.isfinite(value).all():
            verdict.failures.append(f"{key} is not finite: {np.array2string(value, threshold=8)}")
        ratios = error_ratio(value, want, tol.as_dict()[key])
        verdict.error_ratios[key] = float(np.max(ratios, initial=0.0))
        if verdict.error_ratios[key] > 1:
            where = int(np.argmax(ratios)) if ratios.ndim else None
            at = "" if where is None else f"[{where}]"
            got_at, want_at = (value[where], want[where]) if where is not None else (value, want)
            verdict.failures.append(
                f"{key}{at} = {float(got_at)!r}, expected {float(want_at)!r} "
                f"(err/tol = {verdict.error_ratios[key]:.3g}, tol = {float(tol.as_dict()[key].flat[where or 0]):.3g})"
            )
    return verdict


def run_case(fn: Callable[..., Any], adapter: Framework, case: Case) -> tuple[dict[str, np.ndarray] | None, Verdict]:
    """Call fn on the case's native inputs; check structure and that inputs were not modified.

    Returns the outputs read back as float64 (None if unusable) and the verdict so far."""
    inputs = adapter.materialize(case)
    snapshot = adapter.snapshot(inputs)
    outputs, verdict = call_safely(fn, *inputs)
    if not verdict.ok:
        return None, verdict
    verdict.merge(check_output_structure(outputs, adapter, case))
    verdict.failures += adapter.changes(inputs, snapshot)
    if not isinstance(outputs, dict) or not all(key in outputs and adapter.is_array(outputs[key])
                                                for key in OUTPUT_KEYS):  # None: `in` raises on it
        return None, verdict
    try:
        values = {key: adapter.to_float64(outputs[key]).reshape(-1 if key != "magnitude_ratio" else ())
                  for key in OUTPUT_KEYS}
    except Exception as error:  # e.g. a wrong number of elements
        verdict.failures.append(f"outputs cannot be read back: {type(error).__name__}: {error}")
        return None, verdict
    if any(values[key].shape != want for key, want in
           zip(OUTPUT_KEYS, [(case.shape[0],), (case.shape[0],), ()])):
        return None, verdict
    return values, verdict


def check_forward_values(
    fn: Callable[..., Any], adapter: Framework, case: Case
) -> tuple[dict[str, np.ndarray] | None, Verdict]:
    """The forward pass against the reference: structure, dtypes, devices, finiteness, values, inputs.
    Also returns the outputs read back as float64 (None if unusable)."""
    values, verdict = run_case(fn, adapter, case)
    if values is not None:
        expected = reference(case.token_log_probs, case.advantages, case.token_mask)
        verdict.merge(compare_values(values, expected, tolerance(expected, case.dtype)))
    return values, verdict


def check_forward(fn: Callable[..., Any], adapter: Framework, case: Case) -> Verdict:
    return check_forward_values(fn, adapter, case)[1]
