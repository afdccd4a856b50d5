"""Uses jnp.mean over the padded token axis (divides by the number of token slots, not by n_i). Wrong when: lp=[[-2,-5,-8]], A=[3], mask=[[T,F,F]] -> token_averaged -2 instead of -6."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    selected = jnp.where(token_mask, token_log_probs.astype(acc), 0.0)
    adv = advantages.astype(acc)
    summed = adv * selected.sum(axis=-1)
    averaged = adv * jnp.mean(selected, axis=-1)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
