"""Zeroes the masked positions and then calls `.mean()`: the token mean is taken over all B x T slots, padding included, so the loss shrinks as the batch is padded wider and a short response's tokens count for less when it shares a batch with a long one. The masked-mean slip every trainer's masked_mean exists to avoid; not tied to one report. Selection uses torch.where, so the divisor is the only bug. Wrong when: one row [3, pad, pad], mask [[T, F, F]] -> 1 instead of 3."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
EXPLAINS = ".mean() over the padding"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    per_token_loss = torch.where(token_mask, token_losses.to(acc), 0.0)
    if per_token_loss.numel() == 0:
        return per_token_loss.sum()
    return per_token_loss.mean()  # the bug: divides by B*T, not by the selected tokens
