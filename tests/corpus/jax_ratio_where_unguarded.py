"""Guards the ratio with jnp.where(D > 0, N / D, 0.0) but divides by the raw D, so when D == 0 (all rows empty or all advantages 0) the forward is 0 and the gradient NaN. Wrong when: lp=[[-1,-2],[-3,-4]], A=[0,0], mask all true -> gradients NaN."""
FRAMEWORK = "jax"
EXPECT = "reject-gradients"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.where(token_mask, token_log_probs.astype(acc), 0.0).sum(axis=-1)
    summed = advantages.astype(acc) * row
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / den, 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
