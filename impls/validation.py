"""Input validation shared by every implementation: metadata only (rank, shape, dtype, device), never
a pass over the data, so it costs nothing in the hot path and never syncs a device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from impls.dtypes import DTYPE_NAMES


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
    token_log_probs: object,
    advantages: object,
    token_mask: object,
    *,
    describe: Callable[[object], ArrayInfo | None],
    kind: str,
    noun: str = "tensor",
    dtypes: tuple[str, ...] = DTYPE_NAMES,
) -> None:
    """Raise TypeError/ValueError naming the argument and what was expected.

    `describe` returns the metadata of one of the framework's arrays, or None for anything else;
    `kind` names the array type in messages ("torch.Tensor"), `noun` the word for it ("tensor").
    """
    log_probs = _described("token_log_probs", token_log_probs, describe, kind)
    if log_probs.dtype not in dtypes:
        raise TypeError(
            f"token_log_probs must be a floating {noun} of dtype {', '.join(dtypes)}, got {log_probs.dtype}"
        )
    if len(log_probs.shape) != 2:
        raise ValueError(f"token_log_probs must be a 2-D (batch, tokens) {noun}, got shape {log_probs.shape}")
    batch, tokens = log_probs.shape
    adv = _described("advantages", advantages, describe, kind)
    _expect("advantages", adv, log_probs.dtype, (batch,), noun)
    mask = _described("token_mask", token_mask, describe, kind)
    _expect("token_mask", mask, "bool", (batch, tokens), noun)
    for name, info in (("advantages", adv), ("token_mask", mask)):
        if None not in (info.device, log_probs.device) and info.device != log_probs.device:
            raise ValueError(
                f"{name} must be on the device of token_log_probs ({log_probs.device}), got {info.device}"
            )
