"""The PyTorch implementation under `torch.compile(fullgraph=True, dynamic=True)`.

Validation runs eagerly (it reads metadata only). What is compiled is the one pass over the tokens, each row's
sum of selected log-probs and its count (`row_pass`), written for what inductor's CPU code does fast: the mask
comes in as its bytes (a free reinterpreting view), is converted to 0.0/1.0 once, and `where(selected != 0, ...)`
and the count reduce it in one fused pass. Inductor loads a bool mask several times slower, and an integer
count costs a second pass. The few operations on the rows' sums after it are impls/torch_eager.py's
(`weights_and_ratio`), eagerly: they read B values, not B x T. The loss reduction
(impls/torch_compile_reduction.py) runs the same compiled pass, so a process that runs both compiles it once,
and inductor's on-disk cache serves the other contract's identical graph.

Sizes are marked unbacked for the call (the marks are removed afterwards), so batch or tokens of 0 or 1 reuse
the general graph instead of each compiling its own; only dtype, device, stride pattern (contiguous,
transposed, strided, expanded) and rows of 2^24 tokens or more (counted in float64) compile anew.

Dynamo counts recompiles per code object and, with `fullgraph=True`, raising past its limit (8 by default)
is an error: four dtypes times four stride patterns, forward and backward, are more variants than that. So
each (dtype, device, autograd) variant gets a compiled copy of its own (`compile_per_variant`), whose few
stride patterns stay far below the limit: a library user can call it with every dtype, layout and shape in
one process with dynamo's default settings. Importing it changes no global setting.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Hashable
from typing import Any

import torch
import torch._dynamo

from impls.torch_eager import EXACT_FLOAT32_COUNT, validate, weights_and_ratio

# Inductor reads an unbacked size's hint to plan its kernels; without one it sees memory traffic of size 0,
# and so never fuses the sum and the count into one pass over the inputs (twice as slow). Only the plan
# depends on it: the kernels are correct for every size. Typical RL shapes.
SIZE_HINTS = {"batch": 1024, "tokens": 4096}


def compile_with_unbacked_sizes(fn: Callable[..., Any], dimensions: tuple[tuple[str, ...], ...]) -> Callable[..., Any]:
    """`torch.compile(fn, fullgraph=True, dynamic=True)`, called with every size marked unbacked: `dimensions`
    names the dimensions of its leading tensor arguments ("batch", "tokens").

    Sizes of the same name (every `batch`, every `tokens`) share one symbol, with a fixed hint. The marks are
    Python attributes on the tensor objects; they are removed after the call, so the caller's tensors come
    back as they were. (The byte view of the mask is a fresh alias each call; it recompiles nothing: five
    layouts cost four graphs per dtype, as the plain bool mask did.)"""
    compiled = torch.compile(fn, fullgraph=True, dynamic=True)

    @functools.wraps(fn)
    def call(*arguments: Any, **keywords: Any) -> Any:  # keywords are passed on as they are (none is marked)
        marked = []
        for tensor, names in zip(arguments, dimensions):
            before = set(tensor.__dict__)
            for dim, name in enumerate(names[: tensor.dim()]):
                torch._dynamo.decorators.mark_unbacked(tensor, dim, hint_override=SIZE_HINTS[name], shape_id=name)
            marked.append((tensor, set(tensor.__dict__) - before))
        try:
            return compiled(*arguments, **keywords)
        finally:
            for tensor, names in marked:
                for name in names:
                    delattr(tensor, name)

    return call


def _code_copy(fn: Callable[..., Any], suffix: str) -> Callable[..., Any]:
    """`fn` with a code object of its own: dynamo keeps compiled graphs and counts recompiles per code object."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}__{suffix}")
    copy = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__doc__ = fn.__kwdefaults__, fn.__doc__
    return copy


def _variant(tensors: tuple[Any, ...]) -> tuple[Hashable, ...]:
    """What forces a recompile anyway: the dtype, the device, whether autograd records (and for which inputs)."""
    first = tensors[0]
    recording = torch.is_grad_enabled() and any(t.requires_grad for t in tensors if isinstance(t, torch.Tensor))
    grads = tuple(t.requires_grad for t in tensors if isinstance(t, torch.Tensor)) if recording else ()
    return first.dtype, first.device.type, grads


def compile_per_variant(fn: Callable[..., Any], dimensions: tuple[tuple[str, ...], ...]) -> Callable[..., Any]:
    """`compile_with_unbacked_sizes(fn, dimensions)`, compiled separately for each (dtype, device, autograd)
    variant of its tensor arguments, so that no code object sees more recompiles than its layouts cause (see the
    module docstring); empty arguments run fn as it is. The lookup is a dict access per call."""
    compiled: dict[Hashable, tuple[Callable[..., Any], Callable[..., Any]]] = {}  # key -> (copy of fn, compiled)

    @functools.wraps(fn)
    def call(*arguments: Any) -> Any:
        if any(isinstance(argument, torch.Tensor) and argument.numel() == 0 for argument in arguments):
            # an empty batch, or rows of no tokens: nothing to fuse, so fn runs as it is (the same values and
            # graph), and no 0-element kernel is launched (inductor's CUDA launcher, torch 2.11, divides by zero
            # sizing the grid of one in the backward)
            return fn(*arguments)
        key = _variant(arguments)
        if key not in compiled:
            suffix = "_".join(str(part).removeprefix("torch.") for part in key[:2]) + ("_grad" if key[2] else "")
            copy = _code_copy(fn, f"{suffix}{len(compiled)}")
            compiled[key] = copy, compile_with_unbacked_sizes(copy, dimensions)
        return compiled[key][1](*arguments)

    call.variants = compiled  # type: ignore[attr-defined]  (each variant's copy of fn: its code holds the graphs)
    return call


def row_pass(token_values: torch.Tensor, mask_bytes: torch.Tensor,
             count_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """What torch.compile traces: each row's sum of selected values (float32 for half inputs) and its count of
    selected tokens. `mask_bytes` is the bool mask viewed as uint8 (0 or 1); `count_dtype` counts exactly
    (float32 below 2^24 tokens, else float64)."""
    accumulate = torch.promote_types(token_values.dtype, torch.float32)
    selected = mask_bytes.to(accumulate)
    sums = torch.where(selected != 0, token_values.to(accumulate), 0).sum(dim=-1)
    return sums, selected.to(count_dtype).sum(dim=-1)


compiled_row_pass = compile_per_variant(row_pass, (("batch", "tokens"), ("batch", "tokens")))


def count_dtype_for(token_log_probs: torch.Tensor) -> torch.dtype:
    """The accumulation dtype while it counts a row exactly; float64 beyond (a graph of its own)."""
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    return accumulate if token_log_probs.shape[-1] < EXACT_FLOAT32_COUNT else torch.float64


def sequence_vs_token_normalization(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    validate(token_log_probs, advantages, token_mask)
    mask_bytes = token_mask.view(torch.uint8)  # same strides, no copy
    selected_sums, counts = compiled_row_pass(token_log_probs, mask_bytes, count_dtype_for(token_log_probs))
    return weights_and_ratio(token_log_probs.dtype, advantages, selected_sums, counts)
