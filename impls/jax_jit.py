"""The canonical formulation in JAX under `jax.jit`, with float64 enabled (x64) so float64 is float64.

The same choices as impls/torch_eager.py: select with `where`, integer counts, float32 accumulation for
half inputs, divisors made safe before dividing. Outputs stay on the input's device (jit follows its
committed inputs). JAX arrays have no strides, so there are no layouts to handle.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402  (after x64 is enabled)

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


def normalize(token_log_probs: jax.Array, advantages: jax.Array, token_mask: jax.Array) -> dict[str, jax.Array]:
    accumulate = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    selected_sums = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=accumulate)
    counts = jnp.sum(token_mask, axis=-1, dtype=jnp.int32)
    sequence_summed = advantages.astype(accumulate) * selected_sums
    token_averaged = sequence_summed / jnp.maximum(counts, 1).astype(accumulate)
    numerator = jnp.sum(jnp.abs(sequence_summed))
    denominator = jnp.sum(jnp.abs(token_averaged))
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
