"""Multiplies advantages[None, :] into the (batch, tokens) matrix, written against the Array API standard, which only broadcasts when batch == tokens (or either is 1) and then weights token t by A_t. Wrong when: batch == tokens == 2, lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> sequence_summed [0,-2] instead of [-6,7]."""
FRAMEWORK = "array-api"
EXPECT = "reject"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    selected = xp.where(token_mask, token_log_probs, xp.zeros_like(token_log_probs))
    summed = xp.sum(advantages[None, :] * selected, axis=-1)
    n = xp.sum(xp.astype(token_mask, token_log_probs.dtype), axis=-1)
    averaged = summed / xp.where(n > 0, n, xp.ones_like(n))
    den = xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, xp.sum(xp.abs(summed)) / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
