"""A per-sequence mean in JAX that zeroes the padding by a product with the mask (its padding is finite, so the forward is right) and guards each row's division with `jnp.where(n > 0, s / n, 0)`. On a row without a selected token the discarded branch's derivative is 0 / 0 = NaN (the JAX FAQ, "gradients contain NaN where using where"), and the product with the mask passes it on: NaN * 0 is NaN at every token of that row. Under one `jax.jit` around forward and backward, XLA on CPU rewrites the product with the converted mask into a select and the NaN disappears; the loss jitted on its own and differentiated outside (`jax.vjp(jax.jit(loss))`, or `jax.grad` without a jit) gives NaN, and so does any compiler that keeps the product. Found by a new-user trial of this suite, which missed it while it judged gradients under one jit."""
FRAMEWORK = "jax"
EXPECT = "reject-gradients"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
MASKED_VALUES = "finite"
EXPLAINS = "guarded by a where"
import jax.numpy as jnp


def loss_normalization(token_losses, token_mask):
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    selected = token_losses.astype(acc) * token_mask  # finite padding: the product is the selection
    counts = jnp.sum(token_mask, axis=-1).astype(acc)
    row_means = jnp.where(counts > 0, jnp.sum(selected, axis=-1) / counts, 0.0)  # the bug: 0 / 0 in the backward
    return jnp.sum(row_means) / max(token_losses.shape[0], 1)
