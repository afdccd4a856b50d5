"""The canonical formulation in JAX under `jax.jit`. Float64 inputs exist only where the caller enabled JAX's
x64 mode; importing this module changes no global setting.

The same choices as impls/torch_eager.py: select with `where`, integer counts, float32 accumulation for
half inputs, divisors made safe before dividing. Outputs stay on the input's device (jit follows its
committed inputs). JAX arrays have no strides, so there are no layouts to handle.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from impls.validation import ArrayInfo, validate_inputs
from reference.magnitude import CONTRACT as MAGNITUDE


def device_name(array: jax.Array) -> str | None:
    if isinstance(array, jax.core.Tracer):
        return None  # under jax.vjp or an outer jit: the device is the caller's business
    device = next(iter(array.devices()))
    return "cpu" if device.platform == "cpu" else f"cuda:{device.id}"


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, jax.Array):
        return None
    return ArrayInfo(tuple(value.shape), str(value.dtype), device_name(value))


# Rows per loop step: about this many bytes of temporaries in the accumulation dtype. XLA's CPU runtime splits a
# loop fusion whose output reaches 256 KB over its thread pool. Blocks just past that step are the slowest (the
# hand-off costs more than the block's work); from 1 MB on, a block is worth handing off, and out of cache two
# threads read more than one. Which side of the step is faster depends on the machine: where the inputs exceed
# the last-level cache, 1 MB blocks beat 128 KB ones; where a large cache held the whole input, 128 KB ones won
# (docs/measurements.md has both machines' tables).
BLOCK_BYTES = 1 << 20
# Below this many tokens a float32 count of a row is exact.
EXACT_FLOAT32_COUNT = 1 << 24


def _whole_rows(
    token_log_probs: jax.Array, token_mask: jax.Array, accumulate: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
    """The plain formulation: on a GPU each reduction fuses with its `where` and runs at memory speed."""
    sums = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=accumulate)
    return sums, jnp.sum(token_mask, axis=-1, dtype=jnp.int32)


def _row_blocks(
    token_log_probs: jax.Array, token_mask: jax.Array, accumulate: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
    """The same, for XLA on CPU, a block of rows per loop step.

    Written whole, XLA on CPU materializes the selected log-probs and the widened mask at full size before
    reducing them; a `lax.map` over row blocks keeps those temporaries block-sized. Block count and size
    are static: the last block starts at batch - rows, overlapping the one before instead of reading past
    the end, and only its new rows are kept.
    """
    batch, tokens = token_log_probs.shape
    rows = min(batch, max(1, BLOCK_BYTES // (tokens * jnp.dtype(accumulate).itemsize)))
    blocks = -(-batch // rows)
    starts = jnp.minimum(jnp.arange(blocks, dtype=jnp.int32) * rows, batch - rows)
    if token_log_probs.dtype == jnp.bfloat16:
        # XLA on CPU widens a bfloat16 array that enters a loop to float32 in one full-size pass, and
        # converts slowly; as raw 16-bit words it stays as it is. A bfloat16 is the top half of the
        # float32 of the same value, so select the words, then shift them into place.
        values = lax.bitcast_convert_type(token_log_probs, jnp.uint16)
    else:
        values = token_log_probs

    def block(start: jax.Array) -> tuple[jax.Array, jax.Array]:
        chunk = lax.dynamic_slice_in_dim(values, start, rows, axis=0)
        mask = lax.dynamic_slice_in_dim(token_mask, start, rows, axis=0)
        if chunk.dtype == jnp.uint16:
            words = jnp.where(mask, chunk, jnp.uint16(0)).astype(jnp.uint32) << 16
            sums = jnp.sum(lax.bitcast_convert_type(words, jnp.float32), axis=-1)
        else:
            sums = jnp.sum(jnp.where(mask, chunk, 0), axis=-1, dtype=accumulate)
        if tokens < EXACT_FLOAT32_COUNT:  # XLA sums float32 faster than int32
            counts = jnp.sum(mask.astype(jnp.float32), axis=-1).astype(jnp.int32)
        else:
            counts = jnp.sum(mask, axis=-1, dtype=jnp.int32)
        return sums, counts

    sums, counts = lax.map(block, starts)
    overlap = blocks * rows - batch  # rows of the last block that the one before already holds
    return (
        jnp.concatenate([sums[:-1].reshape(-1), sums[-1, overlap:]]),
        jnp.concatenate([counts[:-1].reshape(-1), counts[-1, overlap:]]),
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _selected_sums_and_counts(
    token_log_probs: jax.Array, token_mask: jax.Array, accumulate: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
    """Per-row sums of the selected log-probs (in `accumulate`) and counts of selected tokens (int32),
    formulated per platform (chosen when lowering, where the inputs' device is known). The derivative
    is given directly (see the jvp below), so the CPU tricks never reach autodiff."""
    batch, tokens = token_log_probs.shape
    if batch == 0 or tokens == 0:  # static: nothing to select, and no block to slice
        return jnp.zeros(batch, accumulate), jnp.zeros(batch, jnp.int32)
    return lax.platform_dependent(
        token_log_probs, token_mask,
        cpu=functools.partial(_row_blocks, accumulate=accumulate),
        default=functools.partial(_whole_rows, accumulate=accumulate),
    )


@_selected_sums_and_counts.defjvp
def _selected_sums_and_counts_jvp(
    accumulate: jnp.dtype, primals: tuple[jax.Array, jax.Array], tangents: tuple[jax.Array, jax.Array]
) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, np.ndarray]]:
    # Linear in the tangent, so reverse mode transposes it: the cotangent of the log-probs is the row's
    # cotangent where selected and exactly 0 elsewhere, whatever the unselected values hold.
    token_log_probs, token_mask = primals
    log_probs_dot, _ = tangents
    sums, counts = _selected_sums_and_counts(token_log_probs, token_mask, accumulate)
    sums_dot = jnp.sum(jnp.where(token_mask, log_probs_dot, 0), axis=-1, dtype=accumulate)
    return (sums, counts), (sums_dot, np.zeros(counts.shape, dtype=jax.dtypes.float0))


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


def compiled_count() -> int:
    """Traces compiled so far (one per shape, dtype and device); benchmarks check timing compiles none."""
    return int(compiled_normalize._cache_size())


def sequence_vs_token_normalization(
    token_log_probs: jax.Array, advantages: jax.Array, token_mask: jax.Array
) -> dict[str, jax.Array]:
    validate_inputs(
        MAGNITUDE, (token_log_probs, advantages, token_mask), describe=_describe, kind="jax.Array", noun="array"
    )
    return compiled_normalize(token_log_probs, advantages, token_mask)
