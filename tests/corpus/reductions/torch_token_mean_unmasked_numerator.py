"""ROLL's `agg_loss` token-mean (alibaba/ROLL@8eb27cc2, roll/utils/functionals.py): the sum of `loss_mat` over every
position, divided by the selected tokens' count; the mask is left out of the numerator, and the caller must zero
the padding first. Padding that is finite but not 0 (a real loss computed at padded positions, as a trainer's
per-token loss is) reaches the loss. Checked with finite padding (`--masked-values finite`), where the report names
the mask left out of the sum; with inf or NaN padding the loss is not finite at all."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
MASKED_VALUES = "finite"
EXPLAINS = "the mask left out of the sum"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    return token_losses.to(acc).sum() / token_mask.sum().clamp(min=1)  # the bug: the padding is summed too
