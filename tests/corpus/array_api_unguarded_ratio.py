"""Guards the per-row division but divides sum|s| by sum|a| unconditionally, written against the Array API standard: 0/0 = NaN when all rows are masked or all advantages are 0. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask all false -> ratio NaN instead of 0."""
FRAMEWORK = "array-api"
EXPECT = "reject"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    summed = advantages * xp.sum(xp.where(token_mask, token_log_probs, xp.zeros_like(token_log_probs)), axis=-1)
    n = xp.sum(xp.astype(token_mask, token_log_probs.dtype), axis=-1)
    averaged = summed / xp.where(n > 0, n, xp.ones_like(n))
    ratio = xp.sum(xp.abs(summed)) / xp.sum(xp.abs(averaged))
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
