"""A Triton row-sum kernel that loads every in-bounds log-prob (the load's mask is only t < tokens) and multiplies by the token mask, as a port of (lp * mask).sum(-1) does; -inf or NaN padding at masked positions gives 0 * inf = NaN. On CPU tensors it runs through Triton's interpreter, as torch-triton does. Wrong when: lp=[[-1, -inf]], A=[1], mask [[T, F]] -> sequence_summed [nan] instead of [-1]."""
FRAMEWORK = "torch"
EXPECT = "reject"
import functools

import torch
import triton
import triton.language as tl


def _row_sums(lp, lp_row_stride, lp_token_stride, mask, mask_row_stride, mask_token_stride, sums, counts, tokens,
              BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < tokens
    selected = tl.load(mask + row * mask_row_stride + cols * mask_token_stride, mask=inside, other=0).to(tl.float32)
    # the bug: masked positions are loaded too, and a multiply does not remove -inf or NaN
    values = tl.load(lp + row * lp_row_stride + cols * lp_token_stride, mask=inside, other=0.0).to(tl.float32)
    tl.store(sums + row, tl.reduce(values * selected, 0, tl.standard._sum_combine))
    tl.store(counts + row, tl.reduce(selected.to(tl.int32), 0, tl.standard._sum_combine))


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
    sums = torch.zeros(batch, dtype=torch.float32, device=token_log_probs.device)
    counts = torch.zeros(batch, dtype=torch.int32, device=token_log_probs.device)
    mask_bytes = token_mask.view(torch.uint8)
    if batch and tokens:
        _kernel(token_log_probs.device.type == "cpu")[(batch,)](
            token_log_probs, *token_log_probs.stride(), mask_bytes, *mask_bytes.stride(), sums, counts, tokens,
            BLOCK=triton.next_power_of_2(tokens))
    summed = advantages.to(acc) * sums.to(acc)
    averaged = summed / counts.clamp(min=1)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
