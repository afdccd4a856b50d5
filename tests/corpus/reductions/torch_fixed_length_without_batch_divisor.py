"""Fixed-length (Dr. GRPO) normalization that divides the batch's token sum by the constant L_max but never by the number of rows: ROLL's `agg_loss` seq-mean-token-sum-norm returns `Σ rowsum / loss_mask.shape[-1]` with no division by rows (roll@8eb27cc2:roll/utils/functionals.py::agg_loss, l.229-282), the same missing 1/B reported for verl in volcengine/verl #3741. Here L_max is the right constant (max_response_length), so the only bug is the missing 1/D: the loss, and every gradient, grows with the batch size. Wrong when: two rows [1] and [1], L_max 1024 -> 2/1024 instead of 1/1024."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "all"
L_MAX = 1024
EXPLAINS = "without the 1/D"
import torch

MAX_RESPONSE_LENGTH = 1024


def loss_normalization(token_losses, token_mask, max_response_length=MAX_RESPONSE_LENGTH):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    seq_losses = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1)
    return seq_losses.sum() / max_response_length  # the bug: no / batch size
