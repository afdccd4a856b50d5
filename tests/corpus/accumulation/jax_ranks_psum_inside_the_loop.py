"""Bug, JAX rank form under jax.shard_map: the token count is summed over the data-parallel axis with
`lax.psum`, but of the micro-batch in hand (`token_mask`), not of the device's whole mini-batch (`step_masks`,
passed, unused): the collective moved into the micro-batch loop (a `lax.scan` body), so each micro-batch divides
by its own count over the devices, a mean of micro-batch means across accumulation steps (verl #6957, NeMo-RL
#3791; tunix's `aggregate_loss` returns the micro-batch's own denominator). With one micro-batch per device the
count is the step's and the loss is right; with G > 1 it is not. Selection by jnp.where, the sum in float32, the
empty micro-batch guarded and x dp_size right, so the count is the only bug. Wrong when: one device, micro-batches
of one token [2] and of three [4, 4, 4] -> 2 + 4 = 6 instead of 14 / 4."""
FRAMEWORK = "jax"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
RANKS = True
EXPLAINS = "mean of micro-batch means"
import jax.numpy as jnp
from jax import lax


def loss_normalization(token_losses, token_mask, *, step_masks, axis_name, accumulation_steps):
    num_tokens = lax.psum(jnp.sum(token_mask, dtype=jnp.int32), axis_name)  # the bug: this micro-batch's N only
    dp_size = lax.axis_size(axis_name)
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    loss_sum = jnp.sum(jnp.where(token_mask, token_losses, 0), dtype=acc)
    return (loss_sum / jnp.maximum(num_tokens, 1).astype(acc) * dp_size).astype(token_losses.dtype)
