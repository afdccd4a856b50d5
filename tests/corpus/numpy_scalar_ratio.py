"""Correct: returns the ratio as a NumPy scalar (`x.sum() / den` gives np.float32, `.astype` keeps it one), not a 0-d ndarray. NumPy's own reductions return such scalars for a 0-d result; it has the dtype and the shape () a 0-d array has, so the contract takes it as one (docs/contracts.md). Float32 (float64) accumulation, where-selected, divisions guarded."""
FRAMEWORK = "numpy"
EXPECT = "accept"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    acc = np.float64 if dt == np.float64 else np.float32
    selected = np.where(token_mask, token_log_probs.astype(acc), acc(0))
    summed = advantages.astype(acc) * selected.sum(axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else acc(0)
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
