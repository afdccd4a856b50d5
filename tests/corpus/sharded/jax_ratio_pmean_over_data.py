"""Bug: the ratio computed on each data shard and then averaged with lax.pmean over "data".

The mean of per-shard ratios is not the ratio of the sums. Shows on meshes with more than one data shard
(2x1, 2x2, 4x1) whenever the shards' ratios differ.
"""

FRAMEWORK = "jax"
EXPECT = "reject"

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
from jax import lax


def loss_normalization(token_log_probs, advantages, token_mask):
    accumulate = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    local = jnp.stack([jnp.sum(jnp.where(token_mask, token_log_probs, 0), -1, dtype=accumulate),
                       jnp.sum(token_mask, -1, dtype=accumulate)])
    sums, counts = lax.psum(local, "sequence")
    summed = advantages.astype(accumulate) * sums
    averaged = summed / jnp.maximum(counts, 1)
    numerator = jnp.sum(summed * jnp.sign(summed))
    denominator = jnp.sum(averaged * jnp.sign(averaged))
    ratio = lax.pmean(jnp.where(denominator > 0, numerator / jnp.where(denominator > 0, denominator, 1), 0),
                      "data")  # BUG: a mean of ratios
    return {"sequence_summed": summed.astype(token_log_probs.dtype),
            "token_averaged": averaged.astype(token_log_probs.dtype),
            "magnitude_ratio": ratio.astype(token_log_probs.dtype)}
