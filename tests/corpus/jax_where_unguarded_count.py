"""jnp.where(n > 0, s / n, 0.0) with the raw count: the forward selects 0 for empty rows, but the discarded 0/0 branch turns the gradient into NaN (the documented jnp.where gradient pitfall). Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask=[[T,T],[F,F]] -> dA[1] NaN."""
FRAMEWORK = "jax"
EXPECT = "reject-gradients"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=acc)
    summed = advantages.astype(acc) * row
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / n, 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
