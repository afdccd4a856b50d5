"""Returns the ratio as a numpy scalar (np.float32(...) / .astype on a scalar) instead of a 0-d ndarray; np.generic is not np.ndarray. Wrong when: any input, e.g. lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> magnitude_ratio is np.float32(2.0)-style scalar."""
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
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else acc(0)
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
