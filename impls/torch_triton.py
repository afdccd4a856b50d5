"""The function as a fused Triton port, forward and backward: what a trainer writes for speed (Liger-Kernel,
Unsloth style), done right.

- Forward: one kernel reads each row's log-probs and mask once, with the inputs' own strides (0 included)
  and storage offsets, and writes per-row sums of the selected log-probs (float32, float64 for float64
  inputs) and per-row counts (int32). Masked positions are never loaded (masked loads) and the loaded
  values pass through `tl.where`, not a multiply, so -inf/NaN padding never enters. The three outputs
  follow from those B-sized vectors with the torch ops of `impls.torch_eager` (the same guarded divisions),
  with no second pass over the tokens.
- Backward: `_SequenceSummed`, a torch.autograd.Function, gets g_i = d loss / d s_i and writes
  d token_log_probs = A_i g_i at selected positions and exactly 0 elsewhere in one Triton pass, and
  d advantages = S_i g_i from the saved row sums S_i. The guarded divisions after it are torch's own, so
  their gradients are NaN-free exactly as in torch-eager.

Interpreter. Triton decides between compiling and interpreting when a function is *decorated*
(`triton.jit` reads `triton.knobs.runtime.interpret`, i.e. TRITON_INTERPRET, at that moment; triton 3.9,
runtime/jit.py). So the kernels are plain functions here, decorated twice on first use: once as usual
(compiled, for CUDA tensors) and once with the knob set inside `knobs.runtime.scope()` (an
InterpretedFunction, for CPU tensors), and each call picks by the tensors' device. Nobody has to set an
environment variable. Triton's own library functions (`tl.sum`, `tl.zeros`) are decorated when
`triton.language` is imported, i.e. compiled-only in such a process, so the kernels use builtins only:
`tl.full`, and `tl.reduce` with triton's `_sum_combine`, which the interpreter maps to `np.sum`.

bfloat16. Triton 3.9's interpreter computes bfloat16 wrong inside a kernel (a float32 -> bfloat16 cast turns
1.0 into 1.7e38; bf16 arithmetic and stores give garbage), while bf16 loads widened to float32 at once are
right. The kernels therefore do no bfloat16 arithmetic and no bfloat16 cast at all, in either mode: bf16
loads are widened at once, and the backward writes a bf16 gradient as bits, rounding the float32 value to
nearest-even with integer ops (what torch's own conversion does) into the output viewed as int16. That is
one pass on the GPU (a float32 scratch cast by torch would be three) and the same code the interpreter
runs, so the fuzzer's verdict on CPU is a verdict on the kernel, not on the interpreter.

Tiles. The interpreter costs about 3 ms per program and per loop step whatever the tile size (measured:
8x17 took 29 ms with one row per program), so on CPU a program takes as many rows and tokens as fit in
INTERPRETER_TILE_ELEMENTS; on CUDA one program reads one row in blocks of CUDA_BLOCK_TOKENS.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from impls import torch_eager
from impls.torch_eager import outputs_from_sequence_summed, validate

# CPU (interpreter): the largest power-of-two token block, and the elements of one program's tile.
INTERPRETER_BLOCK_TOKENS = 4096
INTERPRETER_TILE_ELEMENTS = 1 << 16
# CUDA: one row per program, read in blocks of this many tokens. Not yet tuned on a GPU.
CUDA_BLOCK_TOKENS = 2048
CUDA_WARPS = 8


def _selected_row_sums_kernel(
    log_probs, log_probs_row_stride, log_probs_token_stride,
    mask, mask_row_stride, mask_token_stride,
    sums, counts, batch, tokens,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ACCUMULATE: tl.constexpr,
):
    """sums[i] = sum of the selected log_probs[i, :] in ACCUMULATE; counts[i] = number selected (int32)."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_inside = rows < batch
    row_sums = tl.full([ROWS, BLOCK], 0, dtype=ACCUMULATE)
    row_counts = tl.full([ROWS, BLOCK], 0, dtype=tl.int32)
    for start in range(0, tokens, BLOCK):
        columns = start + tl.arange(0, BLOCK).to(tl.int64)
        inside = row_inside[:, None] & (columns[None, :] < tokens)
        mask_bytes = tl.load(mask + rows[:, None] * mask_row_stride + columns[None, :] * mask_token_stride,
                             mask=inside, other=0)
        selected = inside & (mask_bytes != 0)
        # Never load a masked position, and select (not multiply) what was loaded: -inf * 0 is NaN.
        values = tl.load(log_probs + rows[:, None] * log_probs_row_stride + columns[None, :] * log_probs_token_stride,
                         mask=selected)
        row_sums += tl.where(selected, values.to(ACCUMULATE), 0.0)
        row_counts += selected.to(tl.int32)
    tl.store(sums + rows, tl.reduce(row_sums, 1, tl.standard._sum_combine), mask=row_inside)
    tl.store(counts + rows, tl.reduce(row_counts, 1, tl.standard._sum_combine), mask=row_inside)


def _log_probs_gradient_kernel(
    row_gradients, mask, mask_row_stride, mask_token_stride, out, batch, tokens,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, BFLOAT16_BITS: tl.constexpr,
):
    """out[i, t] = row_gradients[i] where mask[i, t], else exactly 0; out is contiguous (batch, tokens).
    With BFLOAT16_BITS, `out` is a bfloat16 tensor viewed as int16 and gets bits rounded to nearest-even."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_inside = rows < batch
    gradients = tl.load(row_gradients + rows, mask=row_inside, other=0.0)
    for start in range(0, tokens, BLOCK):
        columns = start + tl.arange(0, BLOCK).to(tl.int64)
        inside = row_inside[:, None] & (columns[None, :] < tokens)
        mask_bytes = tl.load(mask + rows[:, None] * mask_row_stride + columns[None, :] * mask_token_stride,
                             mask=inside, other=0)
        values = tl.where(inside & (mask_bytes != 0), gradients[:, None], 0.0)
        offsets = rows[:, None] * tokens + columns[None, :]
        if BFLOAT16_BITS:
            # Round float32 to bfloat16 in integers (no bf16 op: see the module docstring). Signed int32 is
            # enough: a finite float's bits plus 0x8000 never overflow, and the low 16 bits of the
            # arithmetic shift are the bf16 bits whatever the sign.
            bits = values.to(tl.float32).to(tl.int32, bitcast=True)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            tl.store(out + offsets, rounded.to(tl.int16), mask=inside)
        else:
            tl.store(out + offsets, values.to(out.dtype.element_ty), mask=inside)


_compiled_kernels: list[Any] = []


@functools.cache
def _kernels(interpreted: bool) -> tuple[Any, Any]:
    """(forward, backward) kernels: interpreted (for CPU tensors) or compiled (for CUDA tensors)."""
    if not interpreted:
        kernels = triton.jit(_selected_row_sums_kernel), triton.jit(_log_probs_gradient_kernel)
        _compiled_kernels.extend(kernels)
        return kernels
    with triton.knobs.runtime.scope():  # restores the knob (and TRITON_INTERPRET) on exit
        triton.knobs.runtime.interpret = True
        return triton.jit(_selected_row_sums_kernel), triton.jit(_log_probs_gradient_kernel)


def compiled_count() -> int:
    """Kernel binaries compiled so far (none on CPU); the benchmarks check that timing compiles none."""
    # JITFunction.device_caches: device -> (kernel cache, ...), filled when a call compiles (triton 3.9).
    return sum(len(caches[0]) for kernel in _compiled_kernels for caches in kernel.device_caches.values())


def _launch(kernel_index: int, device: torch.device, batch: int, tokens: int, *args: Any, **constants: Any) -> None:
    """Run a kernel over all rows, interpreted on CPU and compiled elsewhere, with the tile for that mode."""
    interpreted = device.type == "cpu"
    kernel = _kernels(interpreted)[kernel_index]
    block = triton.next_power_of_2(max(tokens, 1))
    if interpreted:
        block = min(block, INTERPRETER_BLOCK_TOKENS)
        rows = min(triton.next_power_of_2(batch), max(1, INTERPRETER_TILE_ELEMENTS // block))
        options = {}
    else:
        block, rows = min(block, CUDA_BLOCK_TOKENS), 1
        options = {"num_warps": CUDA_WARPS if block >= 1024 else 4}
    kernel[(triton.cdiv(batch, rows),)](*args, batch, tokens, ROWS=rows, BLOCK=block, **constants, **options)


def selected_row_sums(token_log_probs: torch.Tensor, mask_bytes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sums of the selected log-probs (float32, float64 for float64) and int32 counts, in one pass."""
    batch, tokens = token_log_probs.shape
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    sums = torch.zeros(batch, dtype=accumulate, device=token_log_probs.device)
    counts = torch.zeros(batch, dtype=torch.int32, device=token_log_probs.device)
    if batch and tokens:  # an empty grid or row has nothing to read: the zeros are the answer
        _launch(0, token_log_probs.device, batch, tokens,
                token_log_probs, *token_log_probs.stride(), mask_bytes, *mask_bytes.stride(), sums, counts,
                ACCUMULATE=tl.float64 if accumulate == torch.float64 else tl.float32)
    return sums, counts


def log_probs_gradient(row_gradients: torch.Tensor, mask_bytes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """d token_log_probs: row_gradients[i] at selected positions, exactly 0 elsewhere, contiguous, in `dtype`."""
    batch, tokens = mask_bytes.shape
    out = torch.empty((batch, tokens), dtype=dtype, device=mask_bytes.device)
    if batch and tokens:
        bfloat16 = dtype == torch.bfloat16
        _launch(1, mask_bytes.device, batch, tokens,
                row_gradients, mask_bytes, *mask_bytes.stride(), out.view(torch.int16) if bfloat16 else out,
                BFLOAT16_BITS=bfloat16)
    return out


class _SequenceSummed(torch.autograd.Function):
    """(s_i = A_i S_i in the accumulation dtype, n_i) with S_i the selected row sums; n_i has no gradient."""

    @staticmethod
    def forward(ctx: Any, token_log_probs: torch.Tensor, advantages: torch.Tensor,
                mask_bytes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sums, counts = selected_row_sums(token_log_probs, mask_bytes)
        ctx.save_for_backward(sums, advantages, mask_bytes)
        ctx.log_probs_dtype = token_log_probs.dtype
        ctx.mark_non_differentiable(counts)
        return advantages.to(sums.dtype) * sums, counts

    @staticmethod
    def backward(ctx: Any, grad_summed: torch.Tensor, _grad_counts: Any) -> tuple[Any, Any, None]:
        sums, advantages, mask_bytes = ctx.saved_tensors
        grad_log_probs = grad_advantages = None
        if ctx.needs_input_grad[0]:
            row_gradients = (advantages.to(sums.dtype) * grad_summed).contiguous()  # A_i g_i
            grad_log_probs = log_probs_gradient(row_gradients, mask_bytes, ctx.log_probs_dtype)
        if ctx.needs_input_grad[1]:
            grad_advantages = (sums * grad_summed).to(advantages.dtype)  # S_i g_i
        return grad_log_probs, grad_advantages, None


def normalize(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The computation alone, without validation."""
    # The bool mask's bytes, without a copy: Triton has no bool pointers to load a 0/1 byte from.
    sequence_summed, counts = _SequenceSummed.apply(token_log_probs, advantages, token_mask.view(torch.uint8))
    if token_log_probs.shape[-1] >= torch_eager.EXACT_FLOAT32_COUNT:
        counts = counts.to(torch.float64)  # a float32 quotient would round the count first
    return outputs_from_sequence_summed(token_log_probs.dtype, sequence_summed, counts)


def sequence_vs_token_normalization(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Sequence-summed and token-averaged policy-gradient weights, and the ratio of their magnitudes.

    token_log_probs: (batch, tokens) float16/bfloat16/float32/float64; advantages: (batch,) same dtype;
    token_mask: (batch, tokens) bool; all on one device (CPU runs Triton's interpreter), any strides.
    Returns (batch,), (batch,) and () tensors in the log-probs' dtype on their device. Inputs are not
    modified.
    """
    validate(token_log_probs, advantages, token_mask)
    return normalize(token_log_probs, advantages, token_mask)
