"""Sums log-probs over all token slots (the mask only enters the count), written against the Array API standard, so prompt/padding values leak in and -inf/NaN padding poisons the row. Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> sequence_summed -45 instead of -6."""
FRAMEWORK = "array-api"
EXPECT = "reject"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    summed = advantages * xp.sum(token_log_probs, axis=-1)
    n = xp.sum(xp.astype(token_mask, token_log_probs.dtype), axis=-1)
    averaged = summed / xp.where(n > 0, n, xp.ones_like(n))
    den = xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, xp.sum(xp.abs(summed)) / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
