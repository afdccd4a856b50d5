"""The canonical per-shard JAX implementation, for `jax.shard_map` over a mesh with axes ("data", "sequence").

Run it as

    jax.shard_map(sequence_vs_token_normalization, mesh=mesh,
                  in_specs=(P("data", "sequence"), P("data"), P("data", "sequence")),
                  out_specs={"sequence_summed": P("data"), "token_averaged": P("data"), "magnitude_ratio": P()})

Each shard holds a block of rows and a slice of their tokens. A row's partial sum and count are summed over
"sequence" (one psum of both, never a mean); N and D over both axes. After the first psum the row values
are invariant over "sequence", so the second psum runs over "data" only: summing over "sequence" as well
would count every row once per sequence shard. shard_map's replication check (check_vma) proves the
outputs are replicated as out_specs say. |x| is x * sign(x), as in impls/jax_jit.py (sign(0) = 0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

DATA, SEQUENCE = "data", "sequence"


def _magnitude(x: jax.Array) -> jax.Array:
    return x * jnp.sign(x)


def sequence_vs_token_normalization(
    token_log_probs: jax.Array, advantages: jax.Array, token_mask: jax.Array
) -> dict[str, jax.Array]:
    """Per-shard body: (rows, tokens) log-probs and mask, (rows,) advantages -> this block's rows' values
    and the global ratio, in the log-probs' dtype."""
    accumulate = jnp.promote_types(token_log_probs.dtype, jnp.float32)
    partial_sums = jnp.sum(jnp.where(token_mask, token_log_probs, 0), axis=-1, dtype=accumulate)
    partial_counts = jnp.sum(token_mask, axis=-1, dtype=accumulate)  # exact below 2^24 tokens
    both = lax.psum(jnp.stack([partial_sums, partial_counts]), SEQUENCE)
    selected_sums, counts = both[0], both[1]
    sequence_summed = advantages.astype(accumulate) * selected_sums
    token_averaged = sequence_summed / jnp.maximum(counts, 1)
    numerator, denominator = lax.psum(
        jnp.stack([jnp.sum(_magnitude(sequence_summed)), jnp.sum(_magnitude(token_averaged))]), DATA)
    has_denominator = denominator > 0
    safe_denominator = jnp.where(has_denominator, denominator, 1)
    magnitude_ratio = jnp.where(has_denominator, numerator / safe_denominator, 0)
    out_dtype = token_log_probs.dtype
    return {
        "sequence_summed": sequence_summed.astype(out_dtype),
        "token_averaged": token_averaged.astype(out_dtype),
        "magnitude_ratio": magnitude_ratio.astype(out_dtype),
    }
