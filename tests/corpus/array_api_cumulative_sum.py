"""Correct, written against the Array API standard: float64 xp.cumulative_sum along tokens with include_initial=True over the where-selected matrix; its last column is the row sum (the initial zero keeps tokens == 0 valid); the count is the same running sum of the mask."""
FRAMEWORK = "array-api"
EXPECT = "accept"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    lp = xp.astype(token_log_probs, xp.float64)
    selected = xp.where(token_mask, lp, xp.zeros_like(lp))
    row_sums = xp.cumulative_sum(selected, axis=-1, include_initial=True)[:, -1]
    counts = xp.cumulative_sum(xp.astype(token_mask, xp.float64), axis=-1, include_initial=True)[:, -1]
    summed = xp.astype(advantages, xp.float64) * row_sums
    averaged = xp.where(counts > 0, summed / xp.where(counts > 0, counts, xp.ones_like(counts)), xp.zeros_like(summed))
    den = xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, xp.sum(xp.abs(summed)) / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    dt = token_log_probs.dtype
    return {"sequence_summed": xp.astype(summed, dt), "token_averaged": xp.astype(averaged, dt), "magnitude_ratio": xp.astype(ratio, dt)}
