"""A JAX port that takes the fixed length from the padded width: tunix's `aggregate_loss` scales each sequence's token sum by `norm`, which defaults to the completion mask's width T (tunix@c7d8950f:tunix/rl/common.py::aggregate_loss, l.763-853, "sequence-mean-token-scale"), the same default verl ships (volcengine/verl #4360, #5417). Under jax.jit the shape is static, so the padded width compiles in as a constant and looks like one; the declared L_max = 1024 is never used (and a batch padded to 0 tokens divides by 0). (sum, denominator) as tunix returns them, divided with a zero-safe floor, over the rows with a token. Wrong when: one row [2, 2] fully selected, padded to 3 tokens -> 4/3 instead of 4/1024."""
FRAMEWORK = "jax"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "nonempty"
L_MAX = 1024
EXPLAINS = "padded width"
import jax.numpy as jnp


def aggregate_loss(per_token_loss, completion_mask, norm=None):
    acc = jnp.promote_types(per_token_loss.dtype, jnp.float32)
    if norm is None:
        norm = completion_mask.shape[-1]  # the bug: the padded width as L_max
    seq_sum = jnp.sum(jnp.where(completion_mask, per_token_loss, 0), axis=-1, dtype=acc)
    denominator = jnp.sum(jnp.any(completion_mask, axis=-1))
    return jnp.sum(seq_sum / norm), denominator


def loss_normalization(token_losses, token_mask):
    unreduced_sum, denominator = aggregate_loss(token_losses, token_mask)
    return jnp.where(denominator > 0, unreduced_sum / jnp.maximum(denominator, 1), 0.0).astype(unreduced_sum.dtype)
