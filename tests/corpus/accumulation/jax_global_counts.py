"""Correct JAX sequence-mean-token-mean over the rows with a selected token, per micro-batch: each row's masked
mean (floored count, so a fully masked row gives 0), summed over the micro-batch and divided by the step's
global D = `num_sequences` (the rows with a token over every micro-batch of every rank, counted before the
loop, as NeMo-RL's global_valid_seqs and verl's global batch size are), times dp_size against the ranks' mean.
The fix of the mean of micro-batch means (verl #6957, NeMo-RL #3791) in sample units. Selection by jnp.where
(masked padding may hold NaN or inf, and where keeps their gradient at 0), sums in float32 (float64 stays
float64), D = 0 guarded by a Python max: an empty micro-batch gives exactly 0 from its losses."""
FRAMEWORK = "jax"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-mean"
ROWS = "nonempty"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1"
import jax.numpy as jnp


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    row_sums = jnp.sum(jnp.where(token_mask, token_losses, 0), axis=-1, dtype=acc)
    row_counts = jnp.sum(token_mask, axis=-1, dtype=acc)
    row_means = row_sums / jnp.maximum(row_counts, 1)
    return (jnp.sum(row_means) / max(num_sequences, 1) * dp_size).astype(token_losses.dtype)
