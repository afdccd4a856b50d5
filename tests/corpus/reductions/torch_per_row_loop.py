"""Correct seq-mean-token-mean over the rows with a token (OpenRLHF's `aggregate_loss(token_level_loss=False)` and tunix's sequence-mean-token-mean, both averaging over B⁺: openrlhf@3c3be623:openrlhf/models/loss.py::aggregate_loss, tunix@c7d8950f:tunix/rl/common.py::aggregate_loss), written as the per-row Python loop a reader checks by eye: each row's selected sum divided by its integer length, empty rows skipped, the sum of the means divided by the number of rows kept (at least 1). The losses are selected with torch.where once, in float32 (float64 stays float64); a batch with no row kept returns that selection's empty sum, which is 0 and stays on the graph (a gradient of 0, not none)."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "per-sequence"
ROWS = "nonempty"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    selected = torch.where(token_mask, token_losses.to(acc), 0.0)
    lengths = token_mask.sum(dim=-1).tolist()
    seq_means = [selected[i].sum() / n for i, n in enumerate(lengths) if n > 0]
    if not seq_means:
        return selected[:, :0].sum()  # nothing selected: 0, still connected to token_losses
    return torch.stack(seq_means).sum() / len(seq_means)
