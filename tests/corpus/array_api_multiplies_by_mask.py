"""Applies the mask by multiplication (sum(lp * mask)) instead of selecting with xp.where, so -inf or NaN at masked positions turns into NaN (-inf * 0), written against the Array API standard. Wrong when: lp=[[-1.5,-inf]], A=[1], mask=[[T,F]] -> sequence_summed NaN instead of -1.5."""
FRAMEWORK = "array-api"
EXPECT = "reject"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    m = xp.astype(token_mask, token_log_probs.dtype)
    summed = advantages * xp.sum(token_log_probs * m, axis=-1)
    n = xp.sum(m, axis=-1)
    averaged = summed / xp.where(n > 0, n, xp.ones_like(n))
    den = xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, xp.sum(xp.abs(summed)) / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
