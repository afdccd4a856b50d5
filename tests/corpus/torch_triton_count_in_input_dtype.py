"""A Triton kernel that walks the tokens one step at a time, as a rollout loop does, and keeps the running count of selected tokens in the log-probs' own element type (count = count + m_t, rounded to it at every step); the sums are right (float32, float64 for float64). In bf16 the count sticks at 256 (256 + 1 rounds back to 256), in fp16 at 2048. On CPU tensors it runs through Triton's interpreter, as torch-triton does; the kernel does no bf16 arithmetic (the interpreter of triton 3.9 computes it wrong), only float32 -> input-dtype roundings, so the verdict is the count's. Wrong when: bf16, one row of 300 selected tokens all -1, A=[1] -> token_averaged -1.171875 instead of -1."""
FRAMEWORK = "torch"
EXPECT = "reject"
import functools

import torch
import triton
import triton.language as tl


def _row_sums(lp, lp_row_stride, lp_token_stride, mask, mask_row_stride, mask_token_stride, sums, counts, batch,
              tokens, ROWS: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    inside = rows < batch
    # The sums, right: a block of tokens at a time, masked loads, selected with where, in float32 (float64).
    total = tl.full([ROWS, BLOCK], 0, ACC)
    for start in range(0, tokens, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = inside[:, None] & (cols[None, :] < tokens)
        selected = ok & (tl.load(mask + rows[:, None] * mask_row_stride + cols[None, :] * mask_token_stride,
                                 mask=ok, other=0) != 0)
        values = tl.load(lp + rows[:, None] * lp_row_stride + cols[None, :] * lp_token_stride, mask=selected)
        total += tl.where(selected, values.to(ACC), 0.0)
    tl.store(sums + rows, tl.reduce(total, 1, tl.standard._sum_combine), mask=inside)
    # The count, wrong: one token per step, the running count rounded to the input's element type at every step.
    count = tl.full([ROWS], 0, tl.float32).to(lp.dtype.element_ty)
    mask_column = mask + rows * mask_row_stride
    for _ in range(0, tokens):
        step = tl.load(mask_column, mask=inside, other=0).to(tl.float32)
        count = (count.to(tl.float32) + step).to(lp.dtype.element_ty)
        mask_column += mask_token_stride
    tl.store(counts + rows, count.to(tl.float32), mask=inside)


@functools.cache
def _kernel(interpreted):
    # triton.jit reads TRITON_INTERPRET when decorating: CPU tensors need the interpreter's variant.
    if not interpreted:
        return triton.jit(_row_sums)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = True
        return triton.jit(_row_sums)


def loss_normalization(token_log_probs, advantages, token_mask):
    batch, tokens = token_log_probs.shape
    dt = token_log_probs.dtype
    acc = torch.promote_types(dt, torch.float32)
    sums = torch.zeros(batch, dtype=acc, device=token_log_probs.device)
    counts = torch.zeros(batch, dtype=torch.float32, device=token_log_probs.device)
    mask_bytes = token_mask.view(torch.uint8)
    rows = min(triton.next_power_of_2(max(batch, 1)), 64)
    if batch and tokens:
        _kernel(token_log_probs.device.type == "cpu")[(triton.cdiv(batch, rows),)](
            token_log_probs, *token_log_probs.stride(), mask_bytes, *mask_bytes.stride(), sums, counts, batch, tokens,
            ROWS=rows, BLOCK=min(triton.next_power_of_2(tokens), 1024),
            ACC=tl.float64 if acc == torch.float64 else tl.float32)
    summed = advantages.to(acc) * sums.to(acc)
    averaged = summed / counts.to(acc).clamp(min=1)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
