"""Sums with keepdims=True and then calls a bare .squeeze(), which also drops the batch axis when batch == 1, so sequence_summed comes back with shape () instead of (1,). Wrong when: batch == 1, lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> sequence_summed shape ()."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    acc = np.float64 if dt == np.float64 else np.float32
    selected = np.where(token_mask, token_log_probs.astype(acc), acc(0))
    weighted = advantages.astype(acc)[:, None] * selected
    summed = weighted.sum(axis=-1, keepdims=True).squeeze()
    n = token_mask.sum(axis=-1)
    averaged = np.where(n > 0, summed / np.maximum(n, 1), acc(0))
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": np.asarray(ratio, dtype=dt)}
