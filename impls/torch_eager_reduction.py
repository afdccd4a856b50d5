"""The canonical PyTorch loss reduction: the one to copy into a trainer.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`token_losses` (batch, tokens) float16/bfloat16/float32/float64 is the per-token loss (advantage folded in),
`token_mask` (batch, tokens) bool; any strides, on one device. The loss is a 0-d tensor: float32 for half inputs,
else the input dtype. The modes (reference/reduction.py has them exactly): token-mean (sum / N),
seq-mean-token-mean (the mean over D rows of each row's mean), seq-mean-token-sum-norm (sum / (D L_max)),
seq-mean-token-sum (sum / D), token-sum; D is every row (rows="all", the book's 1/B) or the rows with a selected
token (rows="nonempty"; rows=None, the default: every row, or the convention of the trainer whose name `mode` is
spelled with, reference/reduction.py's TRAINER_CONVENTIONS).

Every choice here answers a bug that trainers have shipped:
- one pass reads each row's losses and mask once for its sum and count, and selects, never a plain float
  product, so -inf or NaN padding at a masked position never reaches the loss (verl #6349): on a GPU a `where`
  fused with the sum; on CPU, for float32 and float64, a block of rows at a time into one reused buffer, the
  mask's bytes widened to 0/1 words (their sum is the rows' counts) that select the losses' bits by an integer
  multiply (or, negated to all ones, an AND), so an unselected value becomes +0.0 whatever it held; its
  gradient is given directly, the row's cotangent where selected and exactly 0 elsewhere. (On CPU a `where`
  costs several ns a token, and every op is a parallel region whose threads wait for each other: four ops a
  block, on blocks that stay in cache, read each input once.) Half inputs take impls/torch_eager.py's pass (the
  mask's 0/1 times the losses, and `nansum` of exactly the NaNs 0 * inf makes);
- counts are exact (integers, or float32 below 2^24 tokens): a count rounded in bfloat16 sticks at 256;
- N and D are counted from the mask, never from the shape: the padded width is not a length (verl #4360);
  L_max is the declared constant, never `token_mask.shape[-1]`;
- every divisor is made safe before dividing (clamped to 1): an all-masked batch gives exactly 0, not 0/0
  (unsloth-zoo #1286), and the loss is still computed from `token_losses`, so it stays connected to the graph
  and its gradient exists (exactly 0): a fresh `torch.tensor(0.0)` for an empty batch cuts the graph, and a
  distributed backward waits forever for it (ROLL 3a7b01f9);
- sums accumulate in float32 for half inputs and the loss stays in float32: no `+ 1e-8` in a denominator
  (in float64 it is a visible bias), no `.item()`, no Python branch on values, no host-device sync.
"""

from __future__ import annotations

import torch

from impls.torch_eager import EXACT_FLOAT32_COUNT, selected_sums_and_counts
from impls.validation import ArrayInfo, validate_inputs
from reference.reduction import CONTRACT as REDUCTION


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, torch.Tensor):
        return None
    device = "cpu" if value.device.type == "cpu" else str(value.device)
    return ArrayInfo(tuple(value.shape), str(value.dtype).removeprefix("torch."), device)


def validate(token_losses: torch.Tensor, token_mask: torch.Tensor, mode: str, rows: str | None,
             l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only) and the declared parameters as the contract reads them (aliases
    resolved; ValueError naming a wrong one)."""
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind="torch.Tensor")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


def row_sums_and_counts(token_losses: torch.Tensor, token_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's sum of selected losses (float32 for half inputs) and its count of selected tokens, one pass."""
    accumulate = torch.promote_types(token_losses.dtype, torch.float32)
    if token_losses.device.type != "cpu":  # a GPU runs each op at memory speed
        return (torch.where(token_mask, token_losses, 0).sum(dim=-1, dtype=accumulate),
                token_mask.sum(dim=-1, dtype=accumulate if token_losses.shape[-1] < EXACT_FLOAT32_COUNT else None))
    return selected_sums_and_counts(token_losses, token_mask, accumulate)


# CPU blocks of rows of about this many tokens: the block's words (2 or 4 MB), split among the threads, stay in
# each core's L2, and the buffer is allocated once per call. Each op is a parallel region whose threads wait for
# each other, so blocks much smaller than this pay more in hand-offs than they save (docs/measurements.md: 2^19
# against 2^17 to 2^22, on a quiet machine and beside a busy process).
BLOCK_ELEMENTS = 1 << 19
_WORDS = {torch.float32: torch.int32, torch.float64: torch.int64}  # an integer word of each width


def _selected_words_sums(token_losses: torch.Tensor, token_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's selected sum (in the input dtype, float32 or float64) and count, on CPU, a block at a time."""
    batch, tokens = token_losses.shape
    words_dtype = _WORDS[token_losses.dtype]
    count_dtype = torch.int32 if tokens < 2**31 else torch.int64
    sums = torch.zeros(batch, dtype=token_losses.dtype)
    counts = torch.zeros(batch, dtype=count_dtype)
    if batch == 0 or tokens == 0:
        return sums, counts
    rows = max(1, min(batch, BLOCK_ELEMENTS // tokens))
    bits = token_losses.view(words_dtype)  # the same bits, any strides
    mask_bytes = token_mask.view(torch.uint8)  # 0 or 1, as impls/torch_eager.py reads them
    buffer = torch.empty((rows, tokens), dtype=words_dtype)
    for start in range(0, batch, rows):
        stop = min(start + rows, batch)
        words = buffer[: stop - start]
        words.copy_(mask_bytes[start:stop])  # 0/1 words
        torch.sum(words, dim=-1, dtype=count_dtype, out=counts[start:stop])
        if words_dtype == torch.int64:  # AVX2 has no 64-bit integer multiply: all ones, and AND
            words.neg_().bitwise_and_(bits[start:stop])
        else:
            words.mul_(bits[start:stop])  # the bits or 0, exactly
        torch.sum(words.view(token_losses.dtype), dim=-1, out=sums[start:stop])
    return sums, counts


class _SelectedRowSums(torch.autograd.Function):
    """`_selected_words_sums` with its derivative given directly: d S_i / d l_it = m_it, so the cotangent of the
    losses is the row's cotangent where selected and exactly 0 elsewhere, whatever the unselected values hold."""

    @staticmethod
    def forward(ctx, token_losses: torch.Tensor, token_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        sums, counts = _selected_words_sums(token_losses, token_mask)
        ctx.save_for_backward(token_mask)
        ctx.mark_non_differentiable(counts)
        return sums, counts

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, sums_grad: torch.Tensor, counts_grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (token_mask,) = ctx.saved_tensors
        return torch.where(token_mask, sums_grad[:, None], 0), None


def fast_row_sums_and_counts(token_losses: torch.Tensor,
                             token_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`row_sums_and_counts` for the loss reduction: on CPU, float32 and float64 take the block pass of 0/1 words
    (see the module docstring); a GPU and half inputs take `row_sums_and_counts`."""
    if token_losses.device.type == "cpu" and token_losses.dtype in _WORDS:
        return _SelectedRowSums.apply(token_losses, token_mask)
    return row_sums_and_counts(token_losses, token_mask)


def reduce_rows(sums: torch.Tensor, counts: torch.Tensor, mode: str, rows: str, l_max: float | None) -> torch.Tensor:
    """The loss of a mode from the rows' sums (in the accumulation dtype) and their exact counts. N and D are
    counted in float64 (exact to 2^53 tokens, where a float32 sum of counts would round past 2^24), and each
    divisor is clamped to 1 before it divides."""
    exact = counts.to(torch.float64)
    if mode == "token-sum":
        return sums.sum()
    if mode == "token-mean":
        return sums.sum() / exact.sum().clamp(min=1)  # N = 0: every sum is 0, and 0 / 1 = 0
    divisor = (torch.ones_like(exact) if rows == "all" else (exact > 0).to(exact.dtype)).sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        return (sums / counts.to(sums.dtype).clamp(min=1)).sum() / divisor  # an empty row's mean: 0 / 1 = 0
    if mode == "seq-mean-token-sum":
        return sums.sum() / divisor
    return sums.sum() / (divisor * l_max)  # seq-mean-token-sum-norm: the declared L_max, never the width


def loss_reduction(token_losses: torch.Tensor, token_mask: torch.Tensor, *, mode: str = "token-mean",
                   rows: str | None = None, l_max: float | None = None) -> torch.Tensor:
    """The scalar loss of `mode` (reference/reduction.py); see the module docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    sums, counts = fast_row_sums_and_counts(token_losses, token_mask)
    loss = reduce_rows(sums, counts, str(declared["mode"]), str(declared["rows"]), declared["l_max"])
    return loss.to(sums.dtype)
