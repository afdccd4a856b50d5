"""Correct: explicit per-row Python loop in float64 (works for batch 0 and tokens 0), results rounded once to the input dtype."""
FRAMEWORK = "numpy"
EXPECT = "accept"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    batch = token_log_probs.shape[0]
    summed = np.zeros(batch, dtype=np.float64)
    averaged = np.zeros(batch, dtype=np.float64)
    for i in range(batch):
        keep = token_mask[i]
        row = token_log_probs[i][keep].astype(np.float64)
        summed[i] = float(advantages[i]) * row.sum()
        if row.size > 0:
            averaged[i] = summed[i] / row.size
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    dt = token_log_probs.dtype
    return {
        "sequence_summed": summed.astype(dt),
        "token_averaged": averaged.astype(dt),
        "magnitude_ratio": np.asarray(ratio, dtype=dt),
    }
