"""Correct: a straight JAX port that uses jnp.abs. jnp.abs differentiates to 1 at 0 where torch.abs gives 0; both are subgradients of |x| at its kink, so a row whose s_i is exactly 0 may take either."""
FRAMEWORK = "jax"
EXPECT = "accept"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=acc)
    s = advantages.astype(acc) * row
    a = s / jnp.maximum(jnp.sum(token_mask, axis=-1), 1).astype(acc)
    denominator = jnp.sum(jnp.abs(a))
    r = jnp.where(denominator > 0, jnp.sum(jnp.abs(s)) / jnp.where(denominator > 0, denominator, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": s.astype(dt), "token_averaged": a.astype(dt), "magnitude_ratio": r.astype(dt)}
