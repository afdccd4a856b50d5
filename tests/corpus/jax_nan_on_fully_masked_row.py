"""Divides by the token count with no guard: a fully masked row gives 0/0 = NaN in token_averaged (and in the ratio). Wrong when: lp=[[-1,-2],[-3,-4]], A=[1,2], mask=[[T,T],[F,F]] -> token_averaged[1] NaN instead of 0."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.where(token_mask, token_log_probs.astype(acc), 0.0).sum(axis=-1)
    summed = advantages.astype(acc) * row
    averaged = summed / token_mask.sum(axis=-1)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
