"""Correct: np.where-select into float32/float64, np.einsum row sums, np.divide with where= and a zero-filled out buffer."""
FRAMEWORK = "numpy"
EXPECT = "accept"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    acc = np.float64 if dt == np.float64 else np.float32
    selected = np.where(token_mask, token_log_probs.astype(acc), acc(0))
    summed = np.einsum("bt,b->b", selected, advantages.astype(acc))
    count = token_mask.sum(axis=-1).astype(acc)
    averaged = np.divide(summed, count, out=np.zeros_like(summed), where=count > 0)
    num = np.abs(summed).sum()
    den = np.abs(averaged).sum()
    ratio = np.divide(num, den, out=np.zeros((), dtype=acc), where=den > 0)
    return {
        "sequence_summed": summed.astype(dt),
        "token_averaged": averaged.astype(dt),
        "magnitude_ratio": np.asarray(ratio).astype(dt),
    }
