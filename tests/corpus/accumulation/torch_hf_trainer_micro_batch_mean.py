"""Bug: the HF Trainer's loss before `num_items_in_batch` (transformers #34191): each micro-batch's loss is the
mean over its own tokens, nothing rescaled, the backward scaled by 1/G and the data-parallel ranks' gradients
averaged, so the step's loss is the plain mean of the R x G micro-batch means: a short micro-batch's tokens
weigh more than a long one's. The step's counts are passed and ignored. Wrong when: one rank, two micro-batches
[1, 1, 1, 1] and [5] -> (1 + 5) / 2 = 3 instead of 9 / 5."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1/G"
EXPLAINS = "a mean of per-micro-batch (per-rank) means"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss = torch.where(token_mask, token_losses.to(acc), 0.0).sum() / token_mask.sum().clamp(min=1)
    return loss.to(token_losses.dtype)  # the bug: its own mean, with no x G against the 1/G backward, no x dp_size
