"""Bug: lax.pmean where lax.psum is needed for the row sums and counts over "sequence".

The mean over the sequence shards leaves token_averaged right (the factor cancels in sum / count) and
divides sequence_summed by the number of sequence shards. Shows on meshes with more than one sequence
shard (1x2, 2x2, 1x4).
"""

FRAMEWORK = "jax"  # check --sharded jax
EXPECT = "reject"

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
from jax import lax


def loss_normalization(token_log_probs, advantages, token_mask):
    accumulate = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    local = jnp.stack([jnp.sum(jnp.where(token_mask, token_log_probs, 0), -1, dtype=accumulate),
                       jnp.sum(token_mask, -1, dtype=accumulate)])
    sums, counts = lax.pmean(local, "sequence")  # BUG: a mean, not a sum
    summed = advantages.astype(accumulate) * sums
    averaged = jnp.where(counts > 0, summed / jnp.where(counts > 0, counts, 1), 0)
    numerator, denominator = lax.psum(jnp.stack([jnp.sum(summed * jnp.sign(summed)),
                                                 jnp.sum(averaged * jnp.sign(averaged))]), "data")
    ratio = jnp.where(denominator > 0, numerator / jnp.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.astype(token_log_probs.dtype),
            "token_averaged": averaged.astype(token_log_probs.dtype),
            "magnitude_ratio": ratio.astype(token_log_probs.dtype)}
