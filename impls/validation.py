"""Input validation shared by every implementation: metadata only (rank, shape, dtype, device), never
a pass over the data, so it costs nothing in the hot path and never syncs a device."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference.contract import Contract
from reference.dtypes import DTYPE_NAMES


@dataclass(frozen=True)
class ArrayInfo:
    shape: tuple[int, ...]
    dtype: str  # a name such as "float32", "bfloat16", "bool"
    device: str | None  # "cpu", "cuda:0", ...; None where unknowable (a JAX tracer)


def _described(name: str, value: object, describe: Callable[[object], ArrayInfo | None], kind: str) -> ArrayInfo:
    info = describe(value)
    if info is None:
        raise TypeError(f"{name} must be a {kind}, got {type(value).__module__}.{type(value).__qualname__}")
    return info


def _expect(name: str, info: ArrayInfo, dtype: str, shape: tuple[int, ...], noun: str) -> None:
    if info.dtype != dtype or info.shape != shape:
        message = f"{name} must be a {dtype} {noun} of shape {shape}, got {info.dtype} of shape {info.shape}"
        raise (TypeError if info.dtype != dtype else ValueError)(message)


def validate_inputs(
    contract: Contract,
    arrays: Sequence[object],
    *,
    describe: Callable[[object], ArrayInfo | None],
    kind: str,
    noun: str = "tensor",
    dtypes: tuple[str, ...] = DTYPE_NAMES,
) -> None:
    """Raise TypeError/ValueError naming the argument and what was expected, for `arrays` given in the order of
    `contract`'s inputs: the first sets the dtype, the sizes of its dimensions and the device.

    `describe` returns the metadata of one of the framework's arrays, or None for anything else;
    `kind` names the array type in messages ("torch.Tensor"), `noun` the word for it ("tensor").
    """
    first_spec, *others = contract.inputs
    first = _described(first_spec.name, arrays[0], describe, kind)
    if first.dtype not in dtypes:
        raise TypeError(f"{first_spec.name} must be a floating {noun} of dtype {', '.join(dtypes)}, got {first.dtype}")
    if len(first.shape) != len(first_spec.dims):
        dims = ", ".join(first_spec.dims)
        raise ValueError(f"{first_spec.name} must be a {len(first_spec.dims)}-D ({dims}) {noun}, "
                         f"got shape {first.shape}")
    sizes = dict(zip(first_spec.dims, first.shape))
    for spec, value in zip(others, arrays[1:]):
        info = _described(spec.name, value, describe, kind)
        _expect(spec.name, info, "bool" if spec.kind == "bool" else first.dtype,
                tuple(sizes[dim] for dim in spec.dims), noun)
        if None not in (info.device, first.device) and info.device != first.device:
            raise ValueError(f"{spec.name} must be on the device of {first_spec.name} ({first.device}), "
                             f"got {info.device}")
