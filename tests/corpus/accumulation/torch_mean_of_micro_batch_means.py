"""Bug: each micro-batch is reduced with a masked-mean helper, so it divides its masked sum by its own token
count and the step's loss is a sum of micro-batch means where the mean over the step's tokens is needed: a
short micro-batch's tokens weigh more than a long one's, 2x at two micro-batches (verl #6957), 32x at 32
(NeMo-RL #3791), the mistake the HF Trainer's loss made before it was given `num_items_in_batch`
(transformers #34191). The step's `num_tokens` is passed and ignored; the x dp_size against DDP's mean is right
and the gradients are summed over the micro-batches, as verl's engine does. Wrong when: one rank, two
micro-batches [1, 1, 1, 1] and [5] -> 1 + 5 = 6 instead of 9 / 5."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
EXPLAINS = "mean of micro-batch means"
import torch


def masked_mean(values, mask):
    acc = torch.promote_types(values.dtype, torch.float32)
    return torch.where(mask, values.to(acc), 0.0).sum() / mask.sum().clamp(min=1)


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    loss = masked_mean(token_losses, token_mask)  # the bug: the micro-batch's own mean, num_tokens unused
    return (loss * dp_size).to(token_losses.dtype)
