"""The canonical formulation in JAX under `jax.jit`, with float64 enabled (x64) so float64 is float64.

The same choices as impls/torch_eager.py: select with `where`, integer counts, float32 accumulation for
half inputs, divisors made safe before dividing. Outputs stay on the input's device (jit follows its
committed inputs). JAX arrays have no strides, so there are no layouts to handle.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402  (after x64 is enabled)
from jax import lax  # noqa: E402

from impls.validation import ArrayInfo, validate_inputs  # noqa: E402


def device_name(array: jax.Array) -> str | None:
    if isinstance(array, jax.core.Tracer):
        return None  # under jax.vjp or an outer jit: the device is the caller's business
    device = next(iter(array.devices()))
    return "cpu" if device.platform == "cpu" else f"cuda:{device.id}"


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, jax.Array):
        return None
    return ArrayInfo(tuple(value.shape), str(value.dtype), device_name(value))


# Rows per loop step: about this many elements, so each step's temporaries stay in cache.
BLOCK_ELEMENTS = 1 << 18


def _selected_sums_and_counts(
    token_log_probs: jax.Array, token_mask: jax.Array, accumulate: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
    """Per-row sums of the selected log-probs and counts of selected tokens, one block of rows per step.

    Written whole, XLA on CPU materializes the selected log-probs and the widened mask at full size before
    reducing them; a `lax.map` over row blocks keeps those temporaries block-sized. The block count and
    size are static (shapes are known when tracing): the last block starts at batch - rows, overlapping the
    one before instead of reading past the end, and only its new rows are kept.
    """
    batch, tokens = token_log_probs.shape
    if batch == 0 or tokens == 0:  # static: nothing to select, and no block to slice
        return jnp.zeros(batch, accumulate), jnp.zeros(batch, jnp.int32)
    rows = min(batch, max(1, BLOCK_ELEMENTS // tokens))
    blocks = -(-batch // rows)
    starts = jnp.minimum(jnp.arange(blocks, dtype=jnp.int32) * rows, max(batch - rows, 0))

    def block(start: jax.Array) -> tuple[jax.Array, jax.Array]:
        log_probs = lax.dynamic_slice_in_dim(token_log_probs, start, rows, axis=0)
        mask = lax.dynamic_slice_in_dim(token_mask, start, rows, axis=0)
        sums = jnp.sum(jnp.where(mask, log_probs, 0), axis=-1, dtype=accumulate)
        return sums, jnp.sum(mask, axis=-1, dtype=jnp.int32)

    sums, counts = lax.map(block, starts)
    overlap = blocks * rows - batch  # rows of the last block that the one before already holds
    return (
        jnp.concatenate([sums[:-1].reshape(-1), sums[-1, overlap:]]),
        jnp.concatenate([counts[:-1].reshape(-1), counts[-1, overlap:]]),
    )


def magnitude(x: jax.Array) -> jax.Array:
    """|x| with derivative sign(x) and sign(0) = 0, the contract's convention (and PyTorch's).

    `jnp.abs` differentiates to 1 at 0: a row with s_i = 0 (A_i = 0, or every selected log-prob 0) would
    then push gradient through the ratio. x * sign(x) is exact in the forward pass (x times +-1 or 0)."""
    return x * jnp.sign(x)


def normalize(token_log_probs: jax.Array, advantages: jax.Array, token_mask: jax.Array) -> dict[str, jax.Array]:
    accumulate = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    selected_sums, counts = _selected_sums_and_counts(token_log_probs, token_mask, accumulate)
    sequence_summed = advantages.astype(accumulate) * selected_sums
    token_averaged = sequence_summed / jnp.maximum(counts, 1).astype(accumulate)
    numerator = jnp.sum(magnitude(sequence_summed))
    denominator = jnp.sum(magnitude(token_averaged))
    has_denominator = denominator > 0
    safe_denominator = jnp.where(has_denominator, denominator, 1)
    magnitude_ratio = jnp.where(has_denominator, numerator / safe_denominator, 0)
    out_dtype = token_log_probs.dtype
    return {
        "sequence_summed": sequence_summed.astype(out_dtype),
        "token_averaged": token_averaged.astype(out_dtype),
        "magnitude_ratio": magnitude_ratio.astype(out_dtype),
    }


compiled_normalize = jax.jit(normalize)


def sequence_vs_token_normalization(
    token_log_probs: jax.Array, advantages: jax.Array, token_mask: jax.Array
) -> dict[str, jax.Array]:
    validate_inputs(
        token_log_probs, advantages, token_mask, describe=_describe, kind="jax.Array", noun="array"
    )
    return compiled_normalize(token_log_probs, advantages, token_mask)
