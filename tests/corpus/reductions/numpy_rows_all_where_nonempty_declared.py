"""The rows convention swapped the other way: declares the per-sequence mean over the rows that have a token (rows="nonempty", as OpenRLHF's `aggregate_loss(token_level_loss=False)` averages over B⁺, openrlhf@3c3be623:openrlhf/models/loss.py::aggregate_loss, and tunix's sequence-mean-token-mean denominator, tunix@c7d8950f:tunix/rl/common.py::aggregate_loss) but divides the sum of the sequence means by the batch's row count `loss.shape[0]`, as TRL's grpo does (trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss). With an empty row in the batch the loss is B⁺/B times the declared one. A NumPy port: np.where selection, float64 sums, np.divide(where=) for the row means, one cast. Wrong when: rows [2] and [], rows=nonempty -> 1 instead of 2."""
FRAMEWORK = "numpy"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
ROWS = "nonempty"
EXPLAINS = "where rows=nonempty is declared"
import numpy as np


def loss_normalization(token_losses, token_mask):
    out_dtype = np.float64 if token_losses.dtype == np.float64 else np.float32
    seq_sums = np.where(token_mask, token_losses, 0).astype(np.float64).sum(axis=-1)
    lengths = token_mask.sum(axis=-1)
    seq_means = np.divide(seq_sums, lengths, out=np.zeros_like(seq_sums), where=lengths > 0)
    num_sequences = max(token_losses.shape[0], 1)  # the bug: every row, where only rows with a token are declared
    return np.asarray(seq_means.sum() / num_sequences, dtype=out_dtype)
