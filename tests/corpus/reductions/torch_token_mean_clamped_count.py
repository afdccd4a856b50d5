"""Correct token-mean (TRL's bnpo, `Σℓm / clamp(N, 1)`, trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss; prime-rl's `max(count, 1)`, prime-rl@559b4477:src/prime_rl/trainer/rl/loss.py): the per-token losses selected with torch.where (never multiplied by the mask, so -inf/NaN padding stays out), summed in float32 (float64 stays float64), and the integer token count clamped to 1 before the one division. An all-masked batch gives 0/1 = 0 with a gradient that exists and is 0."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "token-mean"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    masked_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    num_tokens = token_mask.sum().clamp(min=1)
    return masked_sum / num_tokens
