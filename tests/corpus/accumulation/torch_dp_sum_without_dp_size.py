"""Correct token-mean for a trainer whose ranks' gradients are summed instead of averaged (an all-reduce SUM comm
hook on DDP, or an FSDP trainer that multiplies its gradients back by the divide factor after the loop, as
prime-rl does with its all-reduced token count, prime-rl@559b4477:src/prime_rl/trainer/rl/train.py, l.301-327,
558): each micro-batch's masked sum is divided by the step's global N = `num_tokens` and NOT multiplied by
dp_size, since nothing divides by R afterwards (x dp_size there would be R times too large, the mirror of the
missing factor of verl #5366). Gradients are summed over the micro-batches (no 1/G). Selection by torch.where,
the sum in float32, N = 0 guarded."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "sum"
BACKWARD_SCALE = "1"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / max(num_tokens, 1)).to(token_losses.dtype)  # ranks summed: no x dp_size
