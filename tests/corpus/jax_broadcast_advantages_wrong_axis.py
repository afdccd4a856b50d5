"""Multiplies advantages[None, :] into the (batch, tokens) matrix, which only broadcasts when batch == tokens (or either is 1) and then weights token t by A_t. Wrong when: batch == tokens == 2, lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> sequence_summed [0,-2] instead of [-6,7]."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    selected = jnp.where(token_mask, token_log_probs.astype(acc), 0.0)
    summed = jnp.sum(advantages.astype(acc)[None, :] * selected, axis=-1)
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
