"""A Triton row-sum kernel that indexes rows as row * tokens + t, assuming contiguous rows (no strides passed), as many ports do; transposed, step-sliced or stride-0 expanded inputs read the wrong elements (and the NaN poison between them). On CPU tensors it runs through Triton's interpreter, as torch-triton does. Wrong when: lp = torch.tensor([[-1., -3.], [-2., -4.]]).t() (transposed view), A=[1, 1], mask all true -> sequence_summed [-4, -6] instead of [-3, -7]."""
FRAMEWORK = "torch"
EXPECT = "reject"
import functools

import torch
import triton
import triton.language as tl


def _row_sums(lp, mask, sums, counts, tokens, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < tokens
    offsets = row * tokens + cols  # the bug: contiguous rows assumed, strides ignored
    selected = inside & (tl.load(mask + offsets, mask=inside, other=0) != 0)
    values = tl.load(lp + offsets, mask=selected)
    tl.store(sums + row, tl.reduce(tl.where(selected, values.to(tl.float32), 0.0), 0, tl.standard._sum_combine))
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
    if batch and tokens:
        _kernel(token_log_probs.device.type == "cpu")[(batch,)](
            token_log_probs, token_mask.view(torch.uint8), sums, counts, tokens, BLOCK=triton.next_power_of_2(tokens))
    summed = advantages.to(acc) * sums.to(acc)
    averaged = summed / counts.clamp(min=1)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
