"""Casts everything to np.float32 for speed and back at the end, losing precision for float64 inputs. Wrong when: float64, lp=[[-0.1]], A=[1], mask=[[T]] -> sequence_summed -0.10000000149011612 instead of -0.1."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    selected = np.where(token_mask, token_log_probs.astype(np.float32), np.float32(0))
    summed = advantages.astype(np.float32) * selected.sum(axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": np.asarray(ratio, dtype=dt)}
