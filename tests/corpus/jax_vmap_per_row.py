"""Correct: per-sequence function vmapped over the batch, float32/float64 accumulation, safe divisors in both where branches."""
FRAMEWORK = "jax"
EXPECT = "accept"
import jax
import jax.numpy as jnp


def _magnitude(x):
    """|x| whose derivative at 0 is 0 (the contract's sign(0) = 0); jnp.abs's is 1 there."""
    return x * jnp.sign(x)


def _row(lp, adv, mask):
    acc = jnp.promote_types(lp.dtype, jnp.float32)
    total = jnp.where(mask, lp.astype(acc), 0.0).sum()
    n = mask.sum()
    summed = adv.astype(acc) * total
    averaged = jnp.where(n > 0, summed / jnp.where(n > 0, n, 1), 0.0)
    return summed, averaged


def loss_normalization(token_log_probs, advantages, token_mask):
    summed, averaged = jax.vmap(_row)(token_log_probs, advantages, token_mask)
    den = _magnitude(averaged).sum()
    safe_den = jnp.where(den > 0, den, 1.0)
    ratio = jnp.where(den > 0, _magnitude(summed).sum() / safe_den, 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.astype(dt), "token_averaged": averaged.astype(dt), "magnitude_ratio": ratio.astype(dt)}
