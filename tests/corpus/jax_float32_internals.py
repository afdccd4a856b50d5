"""Hard-codes float32 for the computation and casts back, losing precision for float64 inputs (with jax_enable_x64). Wrong when: float64, lp=[[-0.1]], A=[1], mask=[[T]] -> sequence_summed -0.10000000149011612 instead of -0.1."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    row = jnp.where(token_mask, token_log_probs.astype(jnp.float32), 0.0).sum(axis=-1)
    summed = advantages.astype(jnp.float32) * row
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
