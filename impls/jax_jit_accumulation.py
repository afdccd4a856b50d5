"""The canonical JAX per-chunk loss for gradient accumulation and data parallelism under `jax.jit`: the one to
copy into a trainer's micro-batch loop (impls/torch_eager_accumulation.py is its PyTorch twin, keyword for
keyword).

    num_tokens, num_sequences = global_normalizers(step_masks, rows="all")  # before the loop: every micro-batch
    for token_losses, token_mask in my_micro_batches:
        loss, grads = jax.value_and_grad(lambda losses: chunk_loss(
            losses, token_mask, num_tokens=num_tokens, num_sequences=num_sequences, dp_size=world,
            accumulation_steps=len(my_micro_batches), mode="token-mean"))(token_losses)

and its rank form, the per-device body of a `jax.shard_map` over the data-parallel mesh axis, which has only its
own micro-batches and counts the step's normalizers itself (one `lax.psum` of both counts over the axis):

    loss = chunk_loss_on_shards(token_losses, token_mask, step_masks=my_masks, axis_name="data",
                                accumulation_steps=len(my_masks), mode="token-mean")

`token_losses` (batch, tokens) float16/bfloat16/float32/float64 jax.Array is a micro-batch's per-token loss,
`token_mask` (batch, tokens) bool. The loss is a 0-d array: float32 for half inputs, else the input dtype. Float64
exists only where the caller enabled JAX's x64 mode; importing this module changes no global setting.

The same choices as the PyTorch built-in, each for the bug it prevents (reference/accumulation.py has the
contract):
- the divisor is the step's N or D, counted over every micro-batch of every rank before the loop (`lax.psum`
  over the data-parallel axis, a sum of counts, never a mean), never the micro-batch's own: a mean of
  micro-batch means weighs a short micro-batch's tokens more (verl #6957, NeMo-RL #3791, tunix's aggregate_loss
  divided at once);
- the counts are exact integers (int64 under x64, else int32) taken from the very mask the losses are reduced
  with, and empty rows count 0 tokens, never clamp(min=1) each (miles #2796); rows="all" counts every row of
  every micro-batch, rows="nonempty" those with a selected token;
- the compensation is applied once: x dp_size against the ranks' mean of gradients, x G against a 1/G backward
  scale, and nothing else; L_max is the declared constant, never the micro-batch's padded width;
- every divisor is clamped to 1 before it divides: an empty micro-batch (no rows, or only fully masked ones)
  gives exactly 0 computed from its losses, so its gradient exists and is exactly 0, and no `jnp.where(n > 0,
  s / n, 0)` sends the NaN of 0/0 into the backward pass;
- the row pass is impls/jax_jit.py's plain one: `where`, never a product, so -inf or NaN padding never reaches
  the loss, and the transpose of `where` gives every masked position exactly 0 gradient; sums in float32 for
  half inputs (float64 for float64). Plain autodiff, no custom derivative: the same code runs under shard_map,
  whose replication check wants every tangent typed as its primal (impls/jax_jit.py's CPU row blocks give their
  integer counts an untyped float0 tangent, which `jax.vjp` inside shard_map rejects);
- one module-level jitted core, compiled once per shape, dtype and device for every mode: the core computes
  every mode's few scalars from the same row pass and picks the declared one by its index, an operand like L_max
  (checked and their aliases resolved in Python, once per call); the counts and the compensation are traced too,
  so a new step's N, D, R or G, or another mode, compiles nothing. Micro-batches come in a few padded shapes
  that repeat step after step, so a mode static to the jit would compile each of those shapes again per mode
  (impls/jax_jit_reduction.py keeps its mode static: a whole batch's shape rarely repeats, and one mode's
  program compiles faster than every mode's).
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from impls.jax_jit import _describe, _whole_rows
from impls.validation import validate_inputs
from reference import reduction
from reference.accumulation import CONTRACT as ACCUMULATION
from reference.reduction import MODES

ROWS = ("all", "nonempty")


def _count_dtype() -> np.dtype:
    """The widest integer JAX has here: int64 under x64, else int32."""
    return jax.dtypes.canonicalize_dtype(np.int64)


def global_normalizers(token_masks: Iterable[jax.Array], rows: str = "all",
                       axis_name: str | None = None) -> tuple[jax.Array, jax.Array]:
    """(N, D) of a step: the selected tokens, and the rows (every row for rows="all", the rows with a selected
    token for "nonempty"), of all the micro-batches in `token_masks`; with `axis_name` (inside shard_map) summed
    over that mesh axis, one `lax.psum` of both, so every device gets the whole step's. Exact integer 0-d arrays
    (int64 under x64, else int32), the same on every device."""
    if rows not in ROWS:
        raise ValueError(f"rows must be one of {ROWS}, got {rows!r}")
    index = _count_dtype()
    counts = jnp.zeros(2, index)
    for mask in token_masks:
        tokens = jnp.sum(mask, dtype=index)
        sequences = (jnp.asarray(mask.shape[0], index) if rows == "all"
                     else jnp.sum(jnp.any(mask, axis=-1), dtype=index))
        counts = counts + jnp.stack([tokens, sequences])
    if axis_name is not None:
        counts = lax.psum(counts, axis_name)
    return counts[0], counts[1]


def _at_least_one(count: jax.Array, accumulate: jnp.dtype) -> jax.Array:
    return jnp.maximum(jnp.asarray(count), 1).astype(accumulate)  # clamped while an integer, then converted once


def _mode_loss(sums: jax.Array, counts: jax.Array, tokens: jax.Array, rows: jax.Array, l_max: jax.Array,
               mode: jax.Array) -> jax.Array:
    """The loss of MODES[mode] from the rows' sums and exact integer counts, N (`tokens`), D (`rows`) and L_max,
    the last three in the sums' dtype and each count at least 1 (N = 0 or D = 0: every sum is 0, and 0 / 1 = 0):
    each row's sum, divided by its count for seq-mean-token-mean (the row's mean; an empty row's is 0 / 1 = 0),
    summed, then divided by the mode's divisor: N, D, D * L_max, D or 1. A division by 1 is exact, so each mode
    rounds as its own formula does; the loss is linear in `sums`, with finite coefficients, so every mode but
    the declared one contributes exactly 0 gradient."""
    accumulate = sums.dtype
    per_row = jnp.where(mode == MODES.index(reduction.SEQ_MEAN_TOKEN_MEAN), jnp.maximum(counts, 1), 1)
    divisors = {reduction.TOKEN_MEAN: tokens, reduction.SEQ_MEAN_TOKEN_MEAN: rows,
                reduction.SEQ_MEAN_TOKEN_SUM_NORM: rows * l_max,  # the declared L_max, never the width
                reduction.SEQ_MEAN_TOKEN_SUM: rows, reduction.TOKEN_SUM: jnp.ones((), accumulate)}
    return jnp.sum(sums / per_row.astype(accumulate)) / jnp.stack([divisors[name] for name in MODES])[mode]


@jax.jit
def compiled_chunk_loss(token_losses: jax.Array, token_mask: jax.Array, num_tokens: jax.Array,
                        num_sequences: jax.Array, compensation: jax.Array, mode: jax.Array,
                        l_max: jax.Array) -> jax.Array:
    """One micro-batch's share of MODES[mode] in the accumulation dtype (float32 for half inputs, float64 for
    float64), with the step's N and D (N = 0 or D = 0 on every rank: every sum is 0, and 0 / 1 = 0)."""
    accumulate = jnp.promote_types(token_losses.dtype, jnp.float32)
    sums, counts = _whole_rows(token_losses, token_mask, accumulate)  # where-selected sums, int32 counts
    loss = _mode_loss(sums, counts, _at_least_one(num_tokens, accumulate), _at_least_one(num_sequences, accumulate),
                      jnp.asarray(l_max).astype(accumulate), mode)
    return (loss * jnp.asarray(compensation).astype(accumulate)).astype(accumulate)


def compiled_count() -> int:
    """Traces compiled so far (one per shape, dtype and device, for every mode); benchmarks check that timing
    compiles none."""
    return int(compiled_chunk_loss._cache_size())


def _compensation(declared: dict[str, object], dp_size: int, accumulation_steps: int) -> int:
    """x dp_size against the ranks' mean of gradients, x G against a 1/G backward scale: once each."""
    return (dp_size if declared["dp_reduce"] == "mean" else 1) * (
        accumulation_steps if declared["backward_scale"] == "1/G" else 1)


def chunk_loss(token_losses: jax.Array, token_mask: jax.Array, *, num_tokens: int | jax.Array,
               num_sequences: int | jax.Array, dp_size: int, accumulation_steps: int, mode: str = "token-mean",
               rows: str | None = None, l_max: float | None = None, dp_reduce: str = "mean",
               backward_scale: str = "1") -> jax.Array:
    """One micro-batch's share of the step's loss of `mode`, with the step's normalizers (Python ints, or the
    integer arrays `global_normalizers` returns): the sum over the step of these, times 1/R where the ranks'
    gradients are averaged and 1/G where the backward is scaled so, is the full batch's loss."""
    validate_inputs(ACCUMULATION, (token_losses, token_mask), describe=_describe, kind="jax.Array", noun="array")
    declared = ACCUMULATION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max,
                                                  "dp_reduce": dp_reduce, "backward_scale": backward_scale})
    return compiled_chunk_loss(token_losses, token_mask, num_tokens, num_sequences,
                               _compensation(declared, dp_size, accumulation_steps), MODES.index(declared["mode"]),
                               declared["l_max"] or 1.0)


def _axis_size(axis_name: str) -> int:
    return lax.axis_size(axis_name) if hasattr(lax, "axis_size") else lax.psum(1, axis_name)


def chunk_loss_on_shards(token_losses: jax.Array, token_mask: jax.Array, *, step_masks: list[jax.Array],
                         axis_name: str, accumulation_steps: int, mode: str = "token-mean", rows: str | None = None,
                         l_max: float | None = None, dp_reduce: str = "mean",
                         backward_scale: str = "1") -> jax.Array:
    """The same on a data-parallel device inside `jax.shard_map`, which has only its own micro-batches: the step's
    normalizers counted over `step_masks` (this device's micro-batches) and summed over `axis_name`, dp_size
    the axis' size, then `chunk_loss`."""
    declared = ACCUMULATION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max,
                                                  "dp_reduce": dp_reduce, "backward_scale": backward_scale})
    num_tokens, num_sequences = global_normalizers(step_masks, str(declared["rows"]), axis_name)
    return chunk_loss(token_losses, token_mask, num_tokens=num_tokens, num_sequences=num_sequences,
                      dp_size=_axis_size(axis_name), accumulation_steps=accumulation_steps, mode=mode, rows=rows,
                      l_max=l_max, dp_reduce=dp_reduce, backward_scale=backward_scale)
