"""Correct seq-mean-token-sum over the rows with a token (verl's `agg_loss` seq-mean-token-sum with its default global_batch_size = B⁺, verl@1dda039b:verl/trainer/ppo/core_algos.py::agg_loss): the masked token sum is one einsum of the losses and the float mask, but the losses are `where`-zeroed first, so the product never meets the -inf/NaN padding (0.0 * 0.0, not NaN * 0.0); the einsum runs in float32 (float64 stays float64). D = B⁺ floored at 1: a batch with no selected token gives 0, with a gradient of 0."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum"
ROWS = "nonempty"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_mask = token_mask.to(acc)
    zeroed = torch.where(token_mask, token_losses.to(acc), 0.0)
    masked_sum = torch.einsum("bt,bt->", zeroed, loss_mask)
    global_batch_size = (token_mask.sum(dim=-1) > 0).sum().clamp(min=1)
    return masked_sum / global_batch_size
