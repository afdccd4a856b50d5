"""Sums log-probs over all token slots (the mask only enters the count), so prompt/padding values leak in and -inf/NaN padding poisons the row. Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> sequence_summed -45 instead of -6."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    acc = np.float64 if dt == np.float64 else np.float32
    summed = advantages.astype(acc) * token_log_probs.astype(acc).sum(axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": np.asarray(ratio, dtype=dt)}
