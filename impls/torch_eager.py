"""The canonical PyTorch implementation: the one to copy into a trainer.

Every choice here answers a bug that trainers have shipped:
- masked positions never leak in, whatever they hold: `where` selects them away (on GPU); the CPU path
  multiplies by the 0/1 mask and `nansum` drops exactly the NaNs that 0 * inf and 0 * NaN make, since
  selected values are finite by contract (a plain `(lp * mask).sum()` returns NaN for -inf padding);
- the per-row divisor is the count of selected tokens, not the padded width, counted exactly: in
  integers, or in float32 while rows are shorter than 2^24 tokens (a count rounded in bfloat16 is wrong
  past 256 tokens);
- half inputs are summed in float32 and the results rounded once to the input dtype;
- each divisor is made safe *before* dividing (count clamped to 1, the ratio's denominator replaced by 1
  where it is 0): a `where` that discards 0/0 still sends NaN into the backward pass;
- no `.item()`, no Python branch on values, no host-device sync.
"""

from __future__ import annotations

import torch

from impls.validation import ArrayInfo, validate_inputs
from reference.magnitude import CONTRACT as MAGNITUDE


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, torch.Tensor):
        return None
    device = "cpu" if value.device.type == "cpu" else str(value.device)
    return ArrayInfo(tuple(value.shape), str(value.dtype).removeprefix("torch."), device)


def validate(token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor) -> None:
    validate_inputs(MAGNITUDE, (token_log_probs, advantages, token_mask), describe=_describe, kind="torch.Tensor")


# Eager: rows per step of about this many elements, so each step's temporaries stay in cache.
CHUNK_ELEMENTS = 1 << 19
# Below this many tokens a float32 count of a row is exact.
EXACT_FLOAT32_COUNT = 1 << 24


def selected_sums_and_counts(
    token_log_probs: torch.Tensor, token_mask: torch.Tensor, accumulate: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sums of the selected log-probs and counts of selected tokens, eagerly, a chunk of rows
    at a time so that no temporary is full-size.

    On CPU `torch.where` costs several ns per element and a bool-to-float conversion about 1 ns; the
    mask read as uint8 converts to 0.0/1.0 at memory speed. The product with it is exact for
    selected values and 0 or NaN (0 * inf, 0 * NaN) for unselected ones, and `nansum` drops exactly
    those NaNs: selected values are finite by contract. Autograd gives 0 to unselected positions
    (the product's derivative is the mask, nansum's is 0 at NaN), never NaN.
    """
    batch, tokens = token_log_probs.shape
    rows = max(1, CHUNK_ELEMENTS // max(tokens, 1))
    mask_bytes = token_mask.view(torch.uint8)
    sums, counts = [], []
    # batch 0 runs one (empty) step too: a fresh zeros tensor instead would cut the graph, and the outputs would
    # carry no gradient to token_log_probs (DDP waits forever for a gradient that never comes)
    for start in range(0, max(batch, 1), rows):
        selected = mask_bytes[start : start + rows].to(accumulate)
        products = token_log_probs[start : start + rows].to(accumulate) * selected
        sums.append(torch.nansum(products, dim=-1))
        if tokens < EXACT_FLOAT32_COUNT:
            counts.append(selected.sum(dim=-1))
        else:
            counts.append(token_mask[start : start + rows].sum(dim=-1))
    return torch.cat(sums), torch.cat(counts)


def normalize(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The computation alone, without validation."""
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    if token_log_probs.device.type != "cpu":
        # A GPU runs each op at memory speed, where chunking would only add kernel launches.
        selected_sums = torch.where(token_mask, token_log_probs, 0).sum(dim=-1, dtype=accumulate)
        counts = token_mask.sum(dim=-1)  # int64: exact for any length
    else:
        selected_sums, counts = selected_sums_and_counts(token_log_probs, token_mask, accumulate)
    return weights_and_ratio(token_log_probs.dtype, advantages, selected_sums, counts)


def weights_and_ratio(
    out_dtype: torch.dtype, advantages: torch.Tensor, selected_sums: torch.Tensor, counts: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The three outputs from the per-row sums of selected log-probs (in the accumulation dtype) and the
    per-row counts of selected tokens (exact, integer or float). Float64 counts of float32 sums (rows of
    2^24 tokens or more) promote the quotient to float64: one rounding fewer, then the same cast."""
    return outputs_from_sequence_summed(out_dtype, advantages.to(selected_sums.dtype) * selected_sums, counts)


def outputs_from_sequence_summed(
    out_dtype: torch.dtype, sequence_summed: torch.Tensor, counts: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The three outputs from s_i = A_i * (selected row sum), in the accumulation dtype, and the counts."""
    token_averaged = sequence_summed / counts.clamp(min=1)  # empty rows: 0 / 1 = 0
    numerator = sequence_summed.abs().sum()
    denominator = token_averaged.abs().sum()
    has_denominator = denominator > 0
    safe_denominator = torch.where(has_denominator, denominator, 1)
    magnitude_ratio = torch.where(has_denominator, numerator / safe_denominator, 0)
    return {
        "sequence_summed": sequence_summed.to(out_dtype),
        "token_averaged": token_averaged.to(out_dtype),
        "magnitude_ratio": magnitude_ratio.to(out_dtype),
    }


def sequence_vs_token_normalization(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Sequence-summed and token-averaged policy-gradient weights, and the ratio of their magnitudes.

    token_log_probs: (batch, tokens) float16/bfloat16/float32/float64; advantages: (batch,) same dtype;
    token_mask: (batch, tokens) bool; all on one device, any strides. Returns (batch,), (batch,) and ()
    tensors in the log-probs' dtype on their device. Inputs are not modified.
    """
    validate(token_log_probs, advantages, token_mask)
    return normalize(token_log_probs, advantages, token_mask)
