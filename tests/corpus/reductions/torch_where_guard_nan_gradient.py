"""Writes the per-sequence mean as per-token weights, `torch.where(mask, loss / n_i, 0)` (the form Liger's GRPO backward writes out, m/(n_i·B), liger@ead96b61:src/liger_kernel/ops/grpo_loss.py, l.899-912, but without its clamp(n_i, 1)), with the raw count: the forward is right, since `where` discards the x/0 of a fully masked row, but autograd still differentiates the discarded branch, 0 / 0 = NaN, at every position of that row, and one NaN in the gradient poisons the update. The documented torch.where/jnp.where pitfall. Every forward value conforms; only the gradient check sees it."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
ROWS = "all"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    lengths = token_mask.sum(dim=-1, keepdim=True).to(acc)
    per_token = torch.where(token_mask, token_losses.to(acc) / lengths, 0.0)  # the bug: n_i = 0 in the discarded branch
    return per_token.sum() / max(token_mask.shape[0], 1)
