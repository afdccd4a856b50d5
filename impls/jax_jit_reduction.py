"""The canonical JAX loss reduction under `jax.jit`: the one to copy into a trainer.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`token_losses` (batch, tokens) float16/bfloat16/float32/float64 jax.Array is the per-token loss (advantage folded
in), `token_mask` (batch, tokens) bool, on one device. The loss is a 0-d array on that device: float32 for half
inputs, else the input dtype. The modes (reference/reduction.py has them exactly): token-mean (sum / N),
seq-mean-token-mean (the mean over D rows of each row's mean), seq-mean-token-sum-norm (sum / (D L_max)),
seq-mean-token-sum (sum / D), token-sum; D is every row (rows="all", the book's 1/B) or the rows with a selected
token (rows="nonempty"; rows=None, the default: every row, or the convention of the trainer whose name `mode` is
spelled with, reference/reduction.py's TRAINER_CONVENTIONS). Float64 inputs exist only where the caller enabled
JAX's x64 mode; importing this module changes no global setting.

The same choices as impls/torch_eager_reduction.py, each for the bug it prevents:
- one module-level jitted core, with the mode, rows and L_max static: the parameters are checked and their
  aliases resolved in Python, once per call, and each declared reduction compiles once per shape and dtype
  (a jit made per call, or a traced mode string, would recompile every step);
- the row pass is impls/jax_jit.py's: per platform (row blocks on CPU, one fused `where`-and-sum elsewhere),
  it selects with `where`, never a product, so -inf or NaN padding never reaches the loss (verl #6349), and
  its derivative is given directly: exactly 0 at every masked position, the row's cotangent at the others;
- counts are integers, exact: N and D are counted from the mask, never from the shape (the padded width is
  not a length, verl #4360), N in the widest integer JAX has (int64 under x64, else int32), and L_max is the
  declared constant, never `token_mask.shape[-1]`;
- every divisor is clamped to 1 before dividing: an all-masked batch gives exactly 0, not 0/0 (unsloth-zoo
  #1286), and the loss is still computed from `token_losses`, so its gradient exists and is exactly 0
  (`jnp.where(n > 0, s / n, 0)` would send the NaN of 0/0 into the backward pass);
- sums accumulate in float32 for half inputs (float64 for float64) and the loss stays there: no `+ 1e-8` in
  a denominator, no host round trip, no Python branch on values.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from impls.jax_jit import _describe, _selected_sums_and_counts
from impls.validation import validate_inputs
from reference.reduction import CONTRACT as REDUCTION


def validate(token_losses: jax.Array, token_mask: jax.Array, mode: str, rows: str | None,
             l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only, tracers included) and the declared parameters as the contract reads
    them (aliases resolved; ValueError naming a wrong one)."""
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind="jax.Array", noun="array")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


def reduce_rows(sums: jax.Array, counts: jax.Array, mode: str, rows: str, l_max: float | None) -> jax.Array:
    """The loss of a mode from the rows' sums (in the accumulation dtype) and their exact integer counts; each
    divisor clamped to 1 before it divides, converted to the accumulation dtype once."""
    accumulate = sums.dtype
    if mode == "token-sum":
        return jnp.sum(sums)
    if mode == "token-mean":
        # N = 0: every sum is 0, and 0 / 1 = 0; int64 where x64 is on (canonicalize gives int32 otherwise)
        tokens = jnp.sum(counts, dtype=jax.dtypes.canonicalize_dtype(np.int64))
        return jnp.sum(sums) / jnp.maximum(tokens, 1).astype(accumulate)
    if rows == "all":
        divisor = jnp.asarray(max(sums.shape[0], 1), accumulate)  # B: static
    else:
        divisor = jnp.maximum(jnp.sum(counts > 0, dtype=jnp.int32), 1).astype(accumulate)  # B+
    if mode == "seq-mean-token-mean":
        means = sums / jnp.maximum(counts, 1).astype(accumulate)  # an empty row's mean: 0 / 1 = 0
        return jnp.sum(means) / divisor
    if mode == "seq-mean-token-sum":
        return jnp.sum(sums) / divisor
    return jnp.sum(sums) / (divisor * l_max)  # seq-mean-token-sum-norm: the declared L_max, never the width


@functools.partial(jax.jit, static_argnames=("mode", "rows", "l_max"))
def compiled_reduction(token_losses: jax.Array, token_mask: jax.Array, mode: str, rows: str,
                       l_max: float | None) -> jax.Array:
    """The loss in the accumulation dtype: float32 for half inputs, float64 for float64."""
    accumulate = jnp.promote_types(token_losses.dtype, jnp.float32)
    sums, counts = _selected_sums_and_counts(token_losses, token_mask, accumulate)
    return reduce_rows(sums, counts, mode, rows, l_max).astype(accumulate)


def compiled_count() -> int:
    """Traces compiled so far (one per shape, dtype, device and declared reduction); benchmarks check that
    timing compiles none."""
    return int(compiled_reduction._cache_size())


def loss_reduction(token_losses: jax.Array, token_mask: jax.Array, *, mode: str = "token-mean",
                   rows: str | None = None, l_max: float | None = None) -> jax.Array:
    """The scalar loss of `mode` (reference/reduction.py); see the module docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    return compiled_reduction(token_losses, token_mask, mode=str(declared["mode"]), rows=str(declared["rows"]),
                              l_max=declared["l_max"])
