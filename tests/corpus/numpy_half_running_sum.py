"""Sums the selected log-probs in the input dtype; numpy reduces ml_dtypes.bfloat16 with a sequential bf16 accumulator, so long rows drift (the total stalls once increments fall below half an ulp). Wrong when: bf16, one row of 3000 selected tokens all -0.37, A=[1] -> sequence_summed -128 instead of -1104."""
FRAMEWORK = "numpy"
EXPECT = "reject"
import numpy as np


def loss_normalization(token_log_probs, advantages, token_mask):
    dt = token_log_probs.dtype
    row = np.where(token_mask, token_log_probs, dt.type(0)).sum(axis=-1)
    summed = advantages.astype(np.float64) * row.astype(np.float64)
    n = token_mask.sum(axis=-1)
    averaged = np.where(n > 0, summed / np.maximum(n, 1), 0.0)
    den = np.abs(averaged).sum()
    ratio = np.abs(summed).sum() / den if den > 0 else 0.0
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": np.asarray(ratio, dtype=dt)}
