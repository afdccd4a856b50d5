"""Bug: the loss is divided by the step's global token count, which already spreads it over the G micro-batches,
and the trainer's backward scales every micro-batch by 1/G as well, uncompensated: the 1/G is applied twice and
the step's loss and gradients are G times too small (reported in TRL #5619 and ms-swift #10117, where the HF
Trainer divides every micro-batch's loss by gradient_accumulation_steps on top of a loss already normalized over
the accumulation window). The global count and the x dp_size are right; the x G against the 1/G backward is
missing. Wrong when: one rank, two micro-batches [2] and [2] -> (1 + 1) / 2 = 1 instead of 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1/G"
EXPLAINS = "1/G applied twice"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    loss = loss_sum / max(num_tokens, 1) * dp_size  # already the chunk's share of the step's mean
    return loss.to(token_losses.dtype)  # the bug: the trainer's 1/G backward then divides by G again (no x G)
