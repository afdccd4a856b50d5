"""Bug: each micro-batch's loss is its masked sum over its own positions, padding included (`token_mask.numel()`,
the same as a `.mean()` of the masked losses over the padded micro-batch), times dp_size: the count a loss written
for unpadded batches keeps when padding arrives, and HF Trainer's per-micro-batch `.mean()` (transformers #34191).
The step's `num_tokens` is passed and ignored; the sum is selected and kept in float32 and an empty micro-batch
is guarded, so the count is the only bug. Wrong when: two micro-batches of one row, [2, pad] and [4, 4] -> 2 / 2 +
8 / 2 = 5 instead of 10 / 3 (a new user's trial named it a per-row clamp(min=1) until its own cause was a
candidate)."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
EXPLAINS = "its own positions, padding included"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / max(token_mask.numel(), 1) * dp_size).to(token_losses.dtype)
