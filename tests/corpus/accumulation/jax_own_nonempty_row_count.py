"""Bug: a JAX sequence-mean-token-sum over the rows with a selected token, written as tunix's `aggregate_loss`
returns it, (unreduced_sum, denominator) with the denominator counted in the micro-batch itself
(`jnp.sum(jnp.any(mask, -1))`), and divided at once: each micro-batch divides by its own D_k, a sum of
micro-batch means, where the step's `num_sequences` (passed, unused) is needed; tunix's trainer sums the
denominators over the micro-batches before dividing (tunix@c7d8950f:tunix/sft/peft_trainer.py, l.517-584), this
port does not (the mistake of verl #6957 and NeMo-RL #3791 in sample units). Selection by jnp.where, the empty
micro-batch guarded, x dp_size right. Wrong when: micro-batches of one row [4] and of two rows [1], [1] -> 4 + 1
= 5 instead of 6 / 3."""
FRAMEWORK = "jax"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-sum"
ROWS = "nonempty"
EXPLAINS = "mean of micro-batch means"
import jax.numpy as jnp


def aggregate_loss(per_token_loss, completion_mask):
    acc = jnp.promote_types(per_token_loss.dtype, jnp.float32)
    unreduced_sum = jnp.sum(jnp.where(completion_mask, per_token_loss, 0), dtype=acc)
    denominator = jnp.sum(jnp.any(completion_mask, axis=-1))  # the bug: this micro-batch's own D
    return unreduced_sum, denominator


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    unreduced_sum, denominator = aggregate_loss(token_losses, token_mask)
    loss = jnp.where(denominator > 0, unreduced_sum / jnp.maximum(denominator, 1), 0.0) * dp_size
    return loss.astype(token_losses.dtype)
