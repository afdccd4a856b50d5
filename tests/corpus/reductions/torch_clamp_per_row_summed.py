"""Clamps each sample's token count to 1 before summing them into the batch's token count: slime's per-token loss divides by `num_tokens = Σ_i clamp_min(n_i, 1)` (slime@624b824a:slime/backends/megatron_utils/loss.py, l.1317; the same divisor reported in miles #2796), so every fully masked sample (a truncated or filtered rollout) adds a phantom token to N and the token mean is too small whenever a batch holds an empty row. Selection is right and the empty batch is guarded, so N is the only bug. Wrong when: rows [2] and [] -> 2/2 = 1 instead of 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
EXPLAINS = "clamp(min=1) summed into N"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    response_lengths = token_mask.sum(dim=-1)
    num_tokens = torch.clamp_min(response_lengths, 1).sum()  # the bug: an empty sample counts as one token
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return loss_sum / num_tokens.clamp(min=1)  # batch 0: no rows at all
