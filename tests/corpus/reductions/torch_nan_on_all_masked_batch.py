"""TRL's dapo loss with the normalizer left unfloored: `(per_token_loss * mask).sum() / num_items_in_batch` without TRL's clamp(min=1), as unsloth-zoo patches it (unsloth-zoo@ce232d6c:unsloth_zoo/rl_replacements.py, l.618-633; reported as unslothai/unsloth-zoo #1286). When every completion in the batch is truncated away (mask all false), the loss is 0/0 = NaN and one NaN step poisons the optimizer state. Masking uses torch.where, so the empty batch is the only bug. Wrong when: mask all false -> NaN instead of 0."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "dapo"
import torch


def loss_normalization(token_losses, token_mask, num_items_in_batch=None):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    if num_items_in_batch is None:
        num_items_in_batch = token_mask.sum()  # the bug: no .clamp(min=1)
    per_token_loss = torch.where(token_mask, token_losses.to(acc), 0.0)
    return per_token_loss.sum() / num_items_in_batch
