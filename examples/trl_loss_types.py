"""TRL-style GRPO loss types (trl/trainer/grpo_trainer.py, `_compute_loss`), one process, no accumulation:
each normalizes the per-token losses its own way. README's "Check your own function" fuzzes each against the
mode it claims (`--reduction grpo`, `bnpo`, `dr_grpo --l-max L`, `dapo`)."""

import torch

MAX_COMPLETION_LENGTH = 1024


def _sums(per_token_loss, completion_mask):
    mask = completion_mask.bool()
    acc = torch.promote_types(per_token_loss.dtype, torch.float32)
    return torch.where(mask, per_token_loss.to(acc), 0.0), mask


def grpo(per_token_loss, completion_mask):
    """The mean over sequences of each sequence's token mean (an empty completion counts, as 0)."""
    masked, mask = _sums(per_token_loss, completion_mask)
    row_means = masked.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    return row_means.sum() / max(mask.shape[0], 1)


def bnpo(per_token_loss, completion_mask):
    """The batch's token mean."""
    masked, mask = _sums(per_token_loss, completion_mask)
    return masked.sum() / mask.sum().clamp(min=1)


def dr_grpo(per_token_loss, completion_mask):
    """Dr. GRPO: every sequence divided by the same constant length, B x max_completion_length."""
    masked, mask = _sums(per_token_loss, completion_mask)
    return masked.sum() / (max(mask.shape[0], 1) * MAX_COMPLETION_LENGTH)


def dapo(per_token_loss, completion_mask):
    """DAPO: the token mean over the whole generation batch (here, one process: this batch)."""
    masked, mask = _sums(per_token_loss, completion_mask)
    num_items_in_batch = mask.sum().clamp(min=1)
    return masked.sum() / num_items_in_batch
