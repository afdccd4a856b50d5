"""Correct seq-mean-token-mean over every row (TRL's grpo and the RLHF book's per-sequence mean, `mean_i[Σ_t ℓm / n_i]`, trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss, l.3124-3150): the guard is `where` with a safe divisor, `torch.where(n > 0, s / torch.where(n > 0, n, 1), 0)`, so no branch that `where` discards ever divides by 0 and the backward of a fully masked row is 0 rather than the 0/0 = NaN a bare `where(n > 0, s / n, 0)` gives. Row sums are selected with torch.where and accumulated in float32 (float64 stays float64); D = B, floored at 1 for a batch of no rows."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
ROWS = "all"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    seq_sums = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1)
    lengths = token_mask.sum(dim=-1)
    nonempty = lengths > 0
    seq_means = torch.where(nonempty, seq_sums / torch.where(nonempty, lengths, 1), 0.0)
    return seq_means.sum() / max(token_mask.shape[0], 1)
