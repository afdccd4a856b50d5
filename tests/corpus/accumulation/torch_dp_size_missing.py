"""Bug: the micro-batch's sum is divided by the step's global token count, but not multiplied by dp_size, so
DDP's mean over the R ranks divides the step's loss and gradients by R once more (verl #5366: the dp_size
factor missing from the policy loss under FSDP's averaging). Right at one rank, R times too small at R. Wrong
when: two ranks of one micro-batch each, [1] and [3] -> (1/2 + 3/2) / 2 = 1 instead of 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
EXPLAINS = "dp_size missing"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / max(num_tokens, 1)).to(token_losses.dtype)  # the bug: no x dp_size against DDP's mean
