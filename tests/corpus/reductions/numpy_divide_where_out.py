"""Correct seq-mean-token-mean over every row in NumPy (the RLHF book's per-sequence mean, TRL's grpo: trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss), guarded the NumPy way: `np.divide(sums, counts, out=zeros, where=counts > 0)` never evaluates x/0 at all, so a fully masked row is exactly 0 with no warning. Losses selected with np.where (never multiplied by the mask), sums in float64, integer counts, one cast to float32 (float64 stays float64) at the end, returned as a 0-d array."""
FRAMEWORK = "numpy"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "grpo"
ROWS = "all"
import numpy as np


def loss_normalization(token_losses, token_mask):
    out_dtype = np.float64 if token_losses.dtype == np.float64 else np.float32
    seq_sums = np.where(token_mask, token_losses, 0).astype(np.float64).sum(axis=-1)
    counts = token_mask.sum(axis=-1)
    seq_means = np.divide(seq_sums, counts, out=np.zeros_like(seq_sums), where=counts > 0)
    return np.asarray(seq_means.sum() / max(token_mask.shape[0], 1), dtype=out_dtype)
