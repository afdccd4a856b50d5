"""Divides by the token count with no guard, written against the Array API standard: a fully masked row gives 0/0 = NaN in token_averaged (and in the ratio). Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask=[[T,T],[F,F]] -> token_averaged[1] NaN instead of 0."""
FRAMEWORK = "array-api"
EXPECT = "reject"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    dt = token_log_probs.dtype
    summed = advantages * xp.sum(xp.where(token_mask, token_log_probs, xp.zeros_like(token_log_probs)), axis=-1)
    averaged = summed / xp.sum(xp.astype(token_mask, dt), axis=-1)
    den = xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, xp.sum(xp.abs(summed)) / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
