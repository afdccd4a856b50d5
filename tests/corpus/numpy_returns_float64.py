"""Computes in float64 and returns the float64 results as they are, so float32/bf16/fp16 callers get upcast outputs. Wrong when: any non-float64 input, e.g. lp=[[-1,-2],[-3,-4]] in float32 -> outputs are float64."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    selected = np.where(token_mask, token_log_probs.astype(np.float64), 0.0)
    summed = advantages.astype(np.float64) * selected.sum(axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
    den = np.abs(averaged).sum()
    ratio = np.asarray(np.abs(summed).sum() / den if den > 0 else 0.0)
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
