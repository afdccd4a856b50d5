"""Computes the magnitude ratio from jax.lax.stop_gradient'ed row values (treated as a logging metric), so its forward is exact but its gradient is zero. Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,-1], mask=[[T,T],[T,F]] -> d ratio / d lp is 0 instead of nonzero."""
FRAMEWORK = "jax"
EXPECT = "reject-gradients"
import jax
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.where(token_mask, token_log_probs.astype(acc), 0.0).sum(axis=-1)
    summed = advantages.astype(acc) * row
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    s_stat, a_stat = jax.lax.stop_gradient((summed, averaged))
    den = jnp.abs(a_stat).sum()
    ratio = jnp.where(den > 0, jnp.abs(s_stat).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
