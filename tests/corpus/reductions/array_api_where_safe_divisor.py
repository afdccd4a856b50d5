"""Correct fixed-length loss over the rows with a token, written once against the Array API standard (array_api_compat.array_namespace): tunix's sequence-mean-token-sum-norm shape (Σ rowsum / norm over B⁺, tunix@c7d8950f:tunix/rl/common.py::aggregate_loss) with norm the declared constant L_max = 1000, never the padded width. xp.where selection, sums with dtype=float32 (float64 stays float64), integer counts, and the row divisor made safe before dividing (`xp.where(d > 0, s / xp.where(d > 0, d, 1), 0)`), so no discarded branch divides by 0."""
FRAMEWORK = "array-api"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "nonempty"
L_MAX = 1000
from array_api_compat import array_namespace

MAX_RESPONSE_LENGTH = 1000


def loss_normalization(token_losses, token_mask):
    xp = array_namespace(token_losses, token_mask)
    acc = xp.float64 if token_losses.dtype == xp.float64 else xp.float32
    selected = xp.where(token_mask, token_losses, xp.zeros_like(token_losses))
    total = xp.sum(selected, dtype=acc)
    lengths = xp.sum(xp.astype(token_mask, xp.int32), axis=-1, dtype=xp.int32)
    rows = xp.astype(xp.sum(xp.astype(lengths > 0, xp.int32), dtype=xp.int32), acc)
    safe = xp.where(rows > 0, rows, xp.ones_like(rows))
    return xp.where(rows > 0, total / (safe * MAX_RESPONSE_LENGTH), xp.zeros_like(total))
