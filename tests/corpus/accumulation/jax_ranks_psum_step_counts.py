"""Correct JAX rank form under jax.shard_map, sequence-mean-token-mean over every row with the HF Trainer's and
DeepSpeed's 1/G backward scale: each device counts the rows of all of its micro-batches (`step_masks`, its whole
mini-batch, before the scan over micro-batches) and sums that count over the data-parallel mesh axis with
`lax.psum` (a sum of counts, never a pmean), so every device divides by the step's D; each row's masked mean
(count floored at 1, so a fully masked row gives 0) is summed over the micro-batch, divided by D and multiplied by
dp_size (`lax.axis_size`) against the mean over devices of the gradients and by G against the 1/G scale, once
each. D comes from the masks' shapes (rows="all": a fully masked row counts), the counts are exact integers,
selection by jnp.where (masked padding may hold NaN or inf), the sums in float32 (float64 stays float64), D = 0
guarded by jnp.maximum: an empty micro-batch gives exactly 0 from its losses."""
FRAMEWORK = "jax"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-mean"
ROWS = "all"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1/G"
RANKS = True
import jax.numpy as jnp
from jax import lax


def step_rows(step_masks, axis_name):
    rows = sum(mask.shape[0] for mask in step_masks)  # every row of every micro-batch of this device
    return lax.psum(jnp.asarray(rows, jnp.int32), axis_name)  # the step's D, the same on every device


def loss_normalization(token_losses, token_mask, *, step_masks, axis_name, accumulation_steps):
    num_sequences = step_rows(step_masks, axis_name)
    dp_size = lax.axis_size(axis_name)
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    row_sums = jnp.sum(jnp.where(token_mask, token_losses, 0), axis=-1, dtype=acc)
    row_counts = jnp.sum(token_mask, axis=-1, dtype=jnp.int32)
    row_means = row_sums / jnp.maximum(row_counts, 1).astype(acc)
    loss = jnp.sum(row_means) / jnp.maximum(num_sequences, 1).astype(acc)
    return (loss * (dp_size * accumulation_steps)).astype(token_losses.dtype)
