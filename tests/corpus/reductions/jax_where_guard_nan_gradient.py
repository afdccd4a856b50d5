"""A JAX port of the where-guarded token mean that divides before it selects: `jnp.where(mask, loss / N, 0).sum()` with the raw count N. On an all-masked batch the forward is right (every x/0 is discarded), but jax.grad differentiates both branches of jnp.where, and the discarded one's derivative 0 / 0 is NaN at every position: the pitfall the JAX FAQ documents ("gradients contain NaN where using where") and the reason tunix floors its denominators (tunix@c7d8950f:tunix/rl/common.py::aggregate_loss, min_denom). Every forward value conforms; only the gradient check sees it."""
FRAMEWORK = "jax"
EXPECT = "reject-gradients"
CONTRACT = "reduction"
REDUCTION = "token-mean"
import jax.numpy as jnp


def loss_normalization(token_losses, token_mask):
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    num_tokens = jnp.sum(token_mask).astype(acc)
    per_token = jnp.where(token_mask, token_losses.astype(acc) / num_tokens, 0.0)  # the bug: N = 0 in the discarded branch
    return jnp.sum(per_token)
