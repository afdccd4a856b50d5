"""Written against the Array API standard, the fixed-length (Dr. GRPO) loss that divides by L_max but not by the number of rows, as ROLL's `agg_loss` seq-mean-token-sum-norm does (roll@8eb27cc2:roll/utils/functionals.py::agg_loss, l.229-282: no division by rows) and as reported for verl in volcengine/verl #3741. xp.where selection, float32 (or float64) sums, the right constant L_max = 1024: the missing 1/D is the only bug. Wrong when: two rows [1] and [1] -> 2/1024 instead of 1/1024."""
FRAMEWORK = "array-api"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "fixed-length"
ROWS = "all"
L_MAX = 1024
EXPLAINS = "without the 1/D"
from array_api_compat import array_namespace

MAX_RESPONSE_LENGTH = 1024


def loss_normalization(token_losses, token_mask):
    xp = array_namespace(token_losses, token_mask)
    acc = xp.float64 if token_losses.dtype == xp.float64 else xp.float32
    selected = xp.where(token_mask, token_losses, xp.zeros_like(token_losses))
    return xp.sum(selected, dtype=acc) / MAX_RESPONSE_LENGTH  # the bug: no / batch size
