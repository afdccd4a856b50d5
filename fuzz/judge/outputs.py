"""The one structure check of what a function returned, forward or backward, used by every engine (one
process, torch ranks, the JAX mesh): the contract's structure, the framework's arrays, the contract's dtypes,
the case's device, the right shapes; then the values read back as float64.

A rank's case is its own shard, so the shapes checked are the rank's: the same code serves all."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuzz.judge.verdict import INPUT_MODIFIED, STRUCTURE, Verdict
from fuzz.report.texts import a_type_name, checked_through, named_in_a_file
from impls.frameworks import VJP, Framework, Inputs, InputSnapshot
from reference.case import Case

GRADIENT_STRUCTURE = "wrong gradient structure"
GRADIENT_MISSING = "no gradient"


@dataclass(frozen=True)
class ReadBack:
    """Outputs (or gradients) read back as float64, by name, and the dtype each came in."""

    values: dict[str, np.ndarray]
    dtypes: dict[str, str]


def check_outputs(result: Any, adapter: Framework, case: Case) -> tuple[ReadBack | None, Verdict]:
    """The result is the contract's structure of the framework's arrays, in an allowed dtype, on the case's
    device, with the case's shapes; read back as float64 (None where unusable)."""
    contract, verdict = case.contract, Verdict()
    outputs = contract.outputs_of(result)
    if outputs is None:
        verdict.fail(STRUCTURE, f"returned {type(result).__name__}, expected {contract.expected_result}")
        return None, verdict
    sizes, allowed = case.sizes, contract.output_dtypes(case.dtype)
    values, dtypes = {}, {}
    for spec in contract.outputs:
        if spec.name not in outputs:
            verdict.fail(STRUCTURE, f"output {spec.name!r} is missing")
            continue
        value = outputs[spec.name]
        if not adapter.is_array(value):
            verdict.fail(STRUCTURE, f"{spec.name} is {a_type_name(value)}, not a "
                                    f"{adapter.output_type or adapter.array_type}{_picked_out(value, adapter, case)}")
            continue
        dtype, shape = adapter.dtype_of(value), contract.output_shape(spec.name, sizes)
        if dtype not in allowed:
            verdict.fail(STRUCTURE, f"{spec.name} has dtype {dtype}, expected {' or '.join(allowed)}")
        if adapter.device_of(value) != case.device:
            verdict.fail(STRUCTURE, f"{spec.name} is on {adapter.device_of(value)}, expected {case.device}")
        if tuple(value.shape) != shape:
            # a loss reshaped to (1,) (as some code does before an all_reduce): its one value picked out is 0-d
            picked = (_checked_instead(case, "its one value", "[0]") if tuple(value.shape) == (1,) and shape == ()
                      and len(contract.outputs) == 1 else "")
            verdict.fail(STRUCTURE, f"{spec.name} has shape {tuple(value.shape)}, expected {shape}{picked}")
            continue
        try:
            values[spec.name], dtypes[spec.name] = adapter.to_float64(value).reshape(shape), dtype
        except Exception as error:  # e.g. an array that cannot be brought to the host
            verdict.fail(STRUCTURE, f"{spec.name} cannot be read back: {type(error).__name__}: {error}")
    if len(values) < len(contract.outputs):
        return None, verdict
    return ReadBack(values, dtypes), verdict


def _picked_out(value: Any, adapter: Framework, case: Case) -> str:
    """Where a function of a one-output contract returned its output among other things, a trainer's
    `(loss, metrics)` or `{"loss": ...}`, how to check it: a lambda that picks the output out ("" otherwise)."""
    contract = case.contract
    if len(contract.outputs) != 1:
        return ""
    name = contract.outputs[0].name
    if isinstance(value, (tuple, list)) and value and adapter.is_array(value[0]):
        where, pick = "its first item", "[0]"
    elif isinstance(value, Mapping) and (keys := [key for key, item in value.items() if adapter.is_array(item)]):
        # the output's own name, else a key that contains it ("pg_loss"), else the first array
        key = min(keys, key=lambda each: (each != name, name not in str(each)))
        where, pick = f"its item {key!r}", f"[{key!r}]"
    else:
        return ""
    return _checked_instead(case, where, pick)


def _checked_instead(case: Case, where: str, pick: str) -> str:
    """"; if WHERE is the loss, check `lambda ...: fn(...)PICK` ...": how to check a function of a one-output
    contract through a lambda that picks its output out of what it returned."""
    contract = case.contract
    name = contract.outputs[0].name
    return (f"; if {where} is the {name}, check `{checked_through(contract, contract.input_names, pick)}` with fn "
            f"your function ({named_in_a_file(f'{name}_only')})")


def check_gradient_arrays(vjp: VJP, adapter: Framework, case: Case) -> tuple[ReadBack | None, Verdict]:
    """Every differentiable input has a gradient (no output detached, the graph not cut), an array of the
    input's dtype and shape; read back as float64."""
    contract, verdict = case.contract, Verdict()
    outputs = contract.outputs_of(vjp.result)
    if outputs is None or not all(adapter.is_array(outputs.get(spec.name)) for spec in contract.outputs):
        # no arrays to differentiate (None, a Python float): what the forward's check says of them, the same bug,
        # not a gradient that is missing
        return None, check_outputs(vjp.result, adapter, case)[1]
    # where nothing is selected the usual cause is a branch that returns a fresh constant (ROLL 3a7b01f9): the
    # contract wants the loss computed from the losses even then, so its gradient exists and is 0
    nothing_selected = bool(vjp.detached) and not case.mask.any()
    for name in vjp.detached:
        verdict.fail(GRADIENT_MISSING, f"{name} carries no gradient (it does not require grad: computed under "
                                       "no_grad, detached, or rebuilt from Python numbers?"
                     + (" No token is selected: a fresh constant returned for that cuts the graph; the loss must "
                        "still be computed from the inputs, its gradient exactly 0)" if nothing_selected else ")"))
    values, sizes = {}, case.sizes
    for spec in contract.differentiable_inputs:
        got, label = vjp.gradients.get(spec.name), f"d {spec.name}"
        shape = tuple(sizes[dim] for dim in spec.dims)
        if got is None:
            verdict.fail(GRADIENT_MISSING, f"the outputs carry no gradient with respect to {spec.name}")
            continue
        if not adapter.is_array(got):
            verdict.fail(GRADIENT_STRUCTURE, f"{label} is {a_type_name(got)}, not a {adapter.array_type}")
            continue
        if adapter.dtype_of(got) != case.dtype:
            verdict.fail(GRADIENT_STRUCTURE, f"{label} has dtype {adapter.dtype_of(got)}, expected {case.dtype}")
        if tuple(got.shape) != shape:
            verdict.fail(GRADIENT_STRUCTURE, f"{label} has shape {tuple(got.shape)}, expected {shape}")
            continue
        values[label] = adapter.to_float64(got)
    if len(values) < len(contract.differentiable_inputs):
        return None, verdict
    return ReadBack(values, {label: case.dtype for label in values}), verdict


def modified_inputs(adapter: Framework, case: Case, inputs: Inputs, before: InputSnapshot) -> Verdict:
    """What the call did to its inputs, judged from the adapter's snapshots before and after: a changed
    value, or (where the framework counts writes) a write even of equal values."""
    after, verdict = adapter.snapshot(inputs), Verdict()
    for index, name in enumerate(case.contract.input_names):
        if not np.array_equal(after.values[index], before.values[index], equal_nan=True):
            verdict.fail(INPUT_MODIFIED, f"{name} was modified in place")
        elif before.write_counts is not None and after.write_counts[index] != before.write_counts[index]:
            verdict.fail(INPUT_MODIFIED, f"{name} was written in place (its version counter moved)")
    return verdict
