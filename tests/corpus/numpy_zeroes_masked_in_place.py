"""Zeroes the dropped positions with lp[~mask] = 0 on the caller's array (forward values are right but the input is mutated; raises on read-only broadcast inputs). Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> caller's lp becomes [[-2,0,0]]."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    token_log_probs[~token_mask] = 0
    acc = np.float64 if token_log_probs.dtype == np.float64 else np.float32
    summed = advantages.astype(acc) * token_log_probs.astype(acc).sum(axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = np.where(n > 0, summed / np.maximum(n, 1), 0).astype(acc)
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": np.asarray(ratio, dtype=dt)}
