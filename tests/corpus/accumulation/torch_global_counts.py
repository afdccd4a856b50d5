"""Correct token-mean per-chunk loss: each micro-batch's masked sum is divided by the step's global token count
`num_tokens`, counted over every micro-batch of every rank before the loop, and multiplied by `dp_size` against
DDP's mean over ranks, the way verl does it (verl@1dda039b:verl/workers/engine/fsdp/transformer_impl.py,
l.705-711: `batch_num_tokens` all-reduced before the micro split, loss x dp_size) and NeMo-RL (global_valid_toks,
loss x dp_size), and what the fixes of verl #6957 and NeMo-RL #3791 restore. Selection by torch.where (masked
padding may hold NaN or inf), the sum in float32 (float64 stays float64), N = 0 guarded, and an empty chunk
gives exactly 0 from its losses, so its gradient exists."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / max(num_tokens, 1) * dp_size).to(token_losses.dtype)
