"""Declares the book's per-sequence mean over every row (rows="all", 1/B) but averages over the rows that have a token: OpenRLHF's `aggregate_loss(token_level_loss=False)` defaults to the mean over B⁺ (openrlhf@3c3be623:openrlhf/models/loss.py::aggregate_loss, l.11-39), as verl's default `global_batch_size` does, while TRL's grpo (trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss) and the RLHF book divide by B. Either convention is a choice; mixing them is the bug: with an empty row in the batch the loss is B/B⁺ times the declared one. Wrong when: rows [2] and [], rows=all -> 2 instead of 1."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
ROWS = "all"
EXPLAINS = "where rows=all is declared"
import torch


def loss_normalization(token_losses, token_mask, global_batch_size=None):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    lengths = token_mask.sum(dim=-1)
    seq_losses = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1) / lengths.clamp(min=1)
    if global_batch_size is None:
        global_batch_size = (lengths > 0).sum().clamp(min=1)  # the bug: B⁺ where B is declared
    return seq_losses.sum() / global_batch_size
