"""Uses xp.mean over the padded token axis (divides by the number of token slots, not by n_i), written against the Array API standard. Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> token_averaged -2 instead of -6 (any row with a masked position)."""
FRAMEWORK = "array-api"
EXPECT = "reject"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    selected = xp.where(token_mask, token_log_probs, xp.zeros_like(token_log_probs))
    summed = advantages * xp.sum(selected, axis=-1)
    averaged = advantages * xp.mean(selected, axis=-1)
    den = xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, xp.sum(xp.abs(summed)) / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
