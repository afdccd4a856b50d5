"""Shifts the response mask left by one (mask[:, 1:] padded with False) although the log-probs are already aligned to their tokens. Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> sequence_summed 0 instead of -6."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    mask = jnp.pad(token_mask[:, 1:], ((0, 0), (0, 1)))
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.where(mask, token_log_probs.astype(acc), 0.0).sum(axis=-1)
    summed = advantages.astype(acc) * row
    n = mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
