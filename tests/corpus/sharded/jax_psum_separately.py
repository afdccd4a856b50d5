"""Correct: row sums and counts summed over "sequence" with one psum each, then N and D over "data" (the
rows are invariant over "sequence" by then, so summing over it too would count each row once per shard).
|x| as x * sign(x): the contract's derivative at 0 (jnp.abs gives 1 there).
"""

FRAMEWORK = "jax"
EXPECT = "accept"

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
from jax import lax


def loss_normalization(token_log_probs, advantages, token_mask):
    accumulate = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    sums = lax.psum(jnp.sum(jnp.where(token_mask, token_log_probs, 0), -1, dtype=accumulate), "sequence")
    counts = lax.psum(jnp.sum(token_mask, -1, dtype=jnp.int32), "sequence")
    summed = advantages.astype(accumulate) * sums
    averaged = summed / jnp.maximum(counts, 1).astype(accumulate)
    numerator = lax.psum(jnp.sum(summed * jnp.sign(summed)), "data")
    denominator = lax.psum(jnp.sum(averaged * jnp.sign(averaged)), "data")
    ratio = jnp.where(denominator > 0, numerator / jnp.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.astype(token_log_probs.dtype),
            "token_averaged": averaged.astype(token_log_probs.dtype),
            "magnitude_ratio": ratio.astype(token_log_probs.dtype)}
