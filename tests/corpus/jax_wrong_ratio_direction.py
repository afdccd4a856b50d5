"""Inverts the magnitude ratio (sum|token_averaged| / sum|sequence_summed|). Wrong when: lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> ratio 0.5 instead of 2."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=acc)
    summed = advantages.astype(acc) * row
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    den = jnp.abs(summed).sum()
    ratio = jnp.where(den > 0, jnp.abs(averaged).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
