"""Accumulates with jnp.sum(dtype=float32) but never casts back, so bf16/fp16 inputs get float32 outputs. Wrong when: any bfloat16/float16 input, e.g. lp=[[-1,-2],[-3,-4]] in bf16 -> outputs are float32."""
FRAMEWORK = "jax"
EXPECT = "reject"
import jax.numpy as jnp


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    row = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=acc)
    summed = advantages.astype(acc) * row
    n = token_mask.sum(axis=-1)
    averaged = jnp.where(n > 0, summed / jnp.maximum(n, 1), 0.0)
    den = jnp.abs(averaged).sum()
    ratio = jnp.where(den > 0, jnp.abs(summed).sum() / jnp.where(den > 0, den, 1.0), 0.0)
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
