"""The canonical PyTorch implementation: the one to copy into a trainer.

Every choice here answers a bug that trainers have shipped:
- masked positions are *selected* away with `where`, never multiplied by the mask (-inf * 0 is NaN);
- the per-row divisor is the count of selected tokens, not the padded width, counted in integers
  (a count rounded in bfloat16 is wrong past 256 tokens);
- half inputs are summed in float32 and the results rounded once to the input dtype;
- each divisor is made safe *before* dividing (count clamped to 1, the ratio's denominator replaced by 1
  where it is 0): a `where` that discards 0/0 still sends NaN into the backward pass;
- no `.item()`, no Python branch on values, no host-device sync: it traces into one graph.
"""

from __future__ import annotations

import torch

from impls.validation import ArrayInfo, validate_inputs


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, torch.Tensor):
        return None
    device = "cpu" if value.device.type == "cpu" else str(value.device)
    return ArrayInfo(tuple(value.shape), str(value.dtype).removeprefix("torch."), device)


def validate(token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor) -> None:
    validate_inputs(token_log_probs, advantages, token_mask, describe=_describe, kind="torch.Tensor")


def normalize(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The computation alone, without validation (torch.compile traces this)."""
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected_sums = torch.where(token_mask, token_log_probs, 0).sum(dim=-1, dtype=accumulate)
    counts = token_mask.sum(dim=-1)  # int64: exact for any length
    sequence_summed = advantages.to(accumulate) * selected_sums
    token_averaged = sequence_summed / counts.clamp(min=1)  # empty rows: 0 / 1 = 0
    numerator = sequence_summed.abs().sum()
    denominator = token_averaged.abs().sum()
    has_denominator = denominator > 0
    safe_denominator = torch.where(has_denominator, denominator, 1)
    magnitude_ratio = torch.where(has_denominator, numerator / safe_denominator, 0)
    out_dtype = token_log_probs.dtype
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
