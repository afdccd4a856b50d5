"""Correct: jnp.where select and jnp.sum(dtype=float32/float64) accumulation, jnp.maximum(n, 1) as safe divisor, where-guarded ratio."""
FRAMEWORK = "jax"
EXPECT = "accept"
import jax.numpy as jnp


def _magnitude(x):
    """|x| whose derivative at 0 is 0 (the contract's sign(0) = 0); jnp.abs's is 1 there."""
    return x * jnp.sign(x)


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    selected = jnp.where(token_mask, token_log_probs, jnp.zeros((), token_log_probs.dtype))
    row = jnp.sum(selected, axis=-1, dtype=acc)
    summed = advantages.astype(acc) * row
    n = jnp.sum(token_mask, axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1).astype(acc), 0.0)
    den = jnp.sum(_magnitude(averaged))
    ratio = jnp.where(den > 0, jnp.sum(_magnitude(summed)) / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
