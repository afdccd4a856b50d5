"""Guards the per-row division but divides sum|s| by sum|a| unconditionally, giving 0/0 = NaN (with a RuntimeWarning) when all rows are masked or all advantages are 0. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask all false -> ratio NaN instead of 0."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    acc = np.float64 if dt == np.float64 else np.float32
    selected = np.where(token_mask, token_log_probs.astype(acc), acc(0))
    summed = advantages.astype(acc) * selected.sum(axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
    ratio = np.asarray(np.abs(summed).sum() / np.abs(averaged).sum())
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
