"""The canonical JAX loss reduction under `jax.jit`: the one to copy into a trainer.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`token_losses` (batch, tokens) float16/bfloat16/float32/float64 jax.Array is the per-token loss (advantage
folded in), `token_mask` (batch, tokens) bool, on one device. The loss is a 0-d array on that device: float32
for half inputs, else the input dtype. The modes (reference/reduction.py has them exactly): token-mean
(sum / N), seq-mean-token-mean (the mean over D rows of each row's mean), seq-mean-token-sum-norm
(sum / (D L_max)), seq-mean-token-sum (sum / D), token-sum; D is every row (rows="all", the book's 1/B) or the
rows with a selected token (rows="nonempty"). Float64 inputs exist only where the caller enabled JAX's x64
mode; importing this module changes no global setting.

The same choices as impls/torch_eager_reduction.py, each for the bug it prevents:
- one module-level jitted core, compiled once per shape, dtype and device for every mode: each mode is the same
  pass for the row sums and counts followed by a few scalars, so the core computes every mode's scalars and
  picks the declared one by its index, an operand like rows and L_max (checked and their aliases resolved in
  Python, once per call). A jit made per call, or a mode static to the jit, would compile the pass again per
  call or per mode; a trainer that switches modes, and the fuzzer that draws one per example, compile nothing
  more;
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

import jax
import jax.numpy as jnp
import numpy as np

from impls.jax_jit import _describe, _selected_sums_and_counts
from impls.validation import validate_inputs
from reference.reduction import CONTRACT as REDUCTION
from reference.reduction import (
    MODES,
    SEQ_MEAN_TOKEN_MEAN,
    SEQ_MEAN_TOKEN_SUM,
    SEQ_MEAN_TOKEN_SUM_NORM,
    TOKEN_MEAN,
    TOKEN_SUM,
)


def validate(token_losses: jax.Array, token_mask: jax.Array, mode: str, rows: str,
             l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only, tracers included) and the declared parameters as the contract reads
    them (aliases resolved; ValueError naming a wrong one)."""
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind="jax.Array", noun="array")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


def divide(sums: jax.Array, counts: jax.Array, tokens: jax.Array, rows: jax.Array, l_max: jax.Array,
           mode: jax.Array) -> jax.Array:
    """The loss of MODES[mode] from the rows' sums and exact integer counts, N (`tokens`), D (`rows`) and L_max,
    the last three in the sums' dtype and each count at least 1 (N = 0 or D = 0: every sum is 0, and 0 / 1 = 0):
    each row's sum, divided by its count for seq-mean-token-mean (the row's mean; an empty row's is 0 / 1 = 0),
    summed, then divided by the mode's divisor: N, D, D * L_max, D or 1. A division by 1 is exact, so each mode
    rounds as its own formula does; the loss is linear in `sums`, with finite coefficients, so every mode but
    the declared one contributes exactly 0 gradient."""
    accumulate = sums.dtype
    per_row = jnp.where(mode == MODES.index(SEQ_MEAN_TOKEN_MEAN), jnp.maximum(counts, 1), 1).astype(accumulate)
    divisors = {TOKEN_MEAN: tokens, SEQ_MEAN_TOKEN_MEAN: rows, SEQ_MEAN_TOKEN_SUM_NORM: rows * l_max,
                SEQ_MEAN_TOKEN_SUM: rows, TOKEN_SUM: jnp.ones((), accumulate)}  # the declared L_max, never the width
    return jnp.sum(sums / per_row) / jnp.stack([divisors[name] for name in MODES])[mode]


def reduce_rows(sums: jax.Array, counts: jax.Array, mode: jax.Array, nonempty: jax.Array,
                l_max: jax.Array) -> jax.Array:
    """The loss of MODES[mode] from the rows' sums (in the accumulation dtype) and their exact integer counts,
    D the rows that hold a selected token where `nonempty`, else every row; N and D counted exactly, clamped to
    1 while integers, then converted to the accumulation dtype once."""
    accumulate = sums.dtype
    # N in the widest integer JAX has: int64 where x64 is on (canonicalize gives int32 otherwise); B is static
    tokens = jnp.maximum(jnp.sum(counts, dtype=jax.dtypes.canonicalize_dtype(np.int64)), 1).astype(accumulate)
    rows = jnp.maximum(jnp.where(nonempty, jnp.sum(counts > 0, dtype=jnp.int32), sums.shape[0]), 1).astype(accumulate)
    return divide(sums, counts, tokens, rows, l_max, mode)


@jax.jit
def compiled_reduction(token_losses: jax.Array, token_mask: jax.Array, mode: jax.Array, nonempty: jax.Array,
                       l_max: jax.Array) -> jax.Array:
    """The loss of MODES[mode] in the accumulation dtype (float32 for half inputs, float64 for float64); `nonempty`
    and `l_max` are read by the modes that divide by D and the fixed-length mode."""
    accumulate = jnp.promote_types(token_losses.dtype, jnp.float32)
    sums, counts = _selected_sums_and_counts(token_losses, token_mask, accumulate)
    return reduce_rows(sums, counts, mode, nonempty, jnp.asarray(l_max).astype(accumulate)).astype(accumulate)


def compiled_count() -> int:
    """Traces compiled so far (one per shape, dtype and device, for every mode); benchmarks check that timing
    compiles none."""
    return int(compiled_reduction._cache_size())


def loss_reduction(token_losses: jax.Array, token_mask: jax.Array, *, mode: str = "token-mean",
                   rows: str = "all", l_max: float | None = None) -> jax.Array:
    """The scalar loss of `mode` (reference/reduction.py); see the module docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    return compiled_reduction(token_losses, token_mask, MODES.index(declared["mode"]), declared["rows"] == "nonempty",
                              declared["l_max"] or 1.0)
