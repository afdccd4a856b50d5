"""Bug: the step's token count is passed as `num_tokens` but shadowed by the micro-batch's own,
`num_tokens = token_mask.sum()`, the line a trainer keeps from its single-batch loss when it adds gradient
accumulation: each micro-batch is divided by its own count, a mean of micro-batch means (verl #6957, NeMo-RL
#3791, transformers #34191). The sum is selected and kept in float32, the empty micro-batch is guarded and the
x dp_size is right, so the count is the only bug. Wrong when: two micro-batches [2] and [4, 4, 4] -> 2 + 4 = 6
instead of 14 / 4."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
EXPLAINS = "mean of micro-batch means"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    num_tokens = token_mask.sum()  # the bug: the micro-batch's own N replaces the step's
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / num_tokens.clamp(min=1) * dp_size).to(token_losses.dtype)
