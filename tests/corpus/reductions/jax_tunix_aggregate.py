"""Correct seq-mean-token-mean over the rows with a token, as tunix aggregates it (tunix@c7d8950f:tunix/rl/common.py::aggregate_loss, l.763-853: sequence-mean-token-mean returns the pair (Σ_i rowsum / clip(n_i, 1), B⁺), and the trainer divides with min_denom 1 and 0 when the denominator is 0, tunix@c7d8950f:tunix/sft/peft_trainer.py): every row sum is selected with jnp.where and accumulated in float32 (float64 under x64), each divided by its count clipped to 1, so no branch divides by 0 and the gradient of a fully masked batch is exactly 0. Runs under jax.jit."""
FRAMEWORK = "jax"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "sequence-mean-token-mean"
ROWS = "nonempty"
import jax.numpy as jnp


def aggregate_loss(per_token_loss, completion_mask):
    acc = jnp.promote_types(per_token_loss.dtype, jnp.float32)
    seq_sum = jnp.sum(jnp.where(completion_mask, per_token_loss, 0), axis=-1, dtype=acc)
    seq_len = jnp.sum(completion_mask, axis=-1)
    unreduced_sum = jnp.sum(seq_sum / jnp.clip(seq_len, 1).astype(acc))
    denominator = jnp.sum(seq_len > 0)
    return unreduced_sum, denominator


def loss_normalization(token_losses, token_mask, min_denom=1):
    unreduced_sum, denominator = aggregate_loss(token_losses, token_mask)
    safe = jnp.maximum(denominator, min_denom).astype(unreduced_sum.dtype)
    return jnp.where(denominator > 0, unreduced_sum / safe, jnp.zeros_like(unreduced_sum))
