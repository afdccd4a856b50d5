"""Masks by multiplying with a float 0/1 weight matrix, so -inf/NaN log-probs at padded positions become NaN (-inf * 0). Wrong when: lp=[[-1.5,-inf]], A=[1], mask=[[T,F]] -> sequence_summed NaN instead of -1.5."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    weights = jnp.where(token_mask, 1.0, 0.0).astype(acc)
    summed = advantages.astype(acc) * jnp.sum(token_log_probs.astype(acc) * weights, axis=-1)
    n = weights.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1.0), 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
