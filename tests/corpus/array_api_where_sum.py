"""Correct, written against the Array API standard: xp.where selection, sums accumulated in float32 for half inputs (xp.sum(..., dtype=)), integer counts, divisors made safe before dividing, one cast to the input dtype at the end. Runs unchanged on array_api_strict, NumPy, torch, JAX and CuPy arrays."""
FRAMEWORK = "array-api"
EXPECT = "accept"
from array_api_compat import array_namespace


def loss_normalization(token_log_probs, advantages, token_mask):
    xp = array_namespace(token_log_probs, advantages, token_mask)
    dt = token_log_probs.dtype
    acc = dt if dt == xp.float64 else xp.float32
    selected = xp.where(token_mask, token_log_probs, xp.zeros_like(token_log_probs))
    summed = xp.astype(advantages, acc) * xp.sum(selected, axis=-1, dtype=acc)
    count = xp.sum(xp.astype(token_mask, xp.int32), axis=-1, dtype=xp.int32)
    averaged = summed / xp.astype(xp.maximum(count, xp.ones_like(count)), acc)
    num, den = xp.sum(xp.abs(summed)), xp.sum(xp.abs(averaged))
    ratio = xp.where(den > 0, num / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
    return {"sequence_summed": xp.astype(summed, dt), "token_averaged": xp.astype(averaged, dt), "magnitude_ratio": xp.astype(ratio, dt)}
