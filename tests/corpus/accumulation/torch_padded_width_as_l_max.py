"""Bug: a seq-mean-token-sum-norm (Dr. GRPO's fixed-length normalization) that takes L_max from the micro-batch's
padded width, `token_mask.shape[-1]`, the default of verl's and tunix's `loss_scale_factor`/`norm` (volcengine/verl
#4360, #5417): a trainer pads each micro-batch to its own longest row, so every micro-batch divides by another
constant and none by the declared L_max = 1024 (verl's own test notes the mode is micro-batch invariant only at
equal padded widths). The step's D and x dp_size are right; a micro-batch padded to width 0 is guarded. Wrong
when: one row [2, 2] padded to 2 tokens -> 4 / 2 instead of 4 / 1024."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "all"
L_MAX = 1024
EXPLAINS = "padded width"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    l_max = max(token_mask.shape[-1], 1)  # the bug: the micro-batch's padded width, not the declared 1024
    return (loss_sum / (max(num_sequences, 1) * l_max) * dp_size).to(token_losses.dtype)
