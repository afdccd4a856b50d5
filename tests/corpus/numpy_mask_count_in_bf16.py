"""Counts tokens as mask.astype(lp.dtype).sum(-1); for ml_dtypes.bfloat16 numpy accumulates sequentially in bf16, so the count sticks at 256. Wrong when: bf16, one row of 300 selected tokens all -1, A=[1] -> token_averaged -1.171875 instead of -1."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    selected = np.where(token_mask, token_log_probs.astype(np.float64), 0.0)
    summed = advantages.astype(np.float64) * selected.sum(axis=-1)
    n = token_mask.astype(dt).sum(axis=-1).astype(np.float64)
    averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": np.asarray(ratio, dtype=dt)}
