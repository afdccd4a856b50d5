"""Masks by multiplying: verl's `agg_loss` computes `masked_sum = (loss_mat * loss_mask).sum()` (verl@1dda039b:verl/trainer/ppo/core_algos.py::agg_loss; reported as volcengine/verl #6349), so a padding position that holds -inf or NaN (a log-ratio of a masked token, an overflowed importance weight) turns the whole loss into NaN, since NaN * 0 and inf * 0 are NaN. The token count is clamped, so masked-out non-finite values are the only bug. Wrong when: one row [1, -inf], mask [[T, F]] -> NaN instead of 1."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
import torch


def loss_normalization(token_losses, token_mask, batch_num_tokens=None):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_mask = token_mask.to(acc)
    if batch_num_tokens is None:
        batch_num_tokens = loss_mask.sum().clamp(min=1)
    masked_sum = (token_losses.to(acc) * loss_mask).sum()  # the bug: select, don't multiply
    return masked_sum / batch_num_tokens
