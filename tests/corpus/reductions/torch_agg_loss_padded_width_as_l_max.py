"""Takes L_max from the padded width: verl's `agg_loss` in seq-mean-token-sum-norm defaults `loss_scale_factor` to `loss_mask.shape[-1]` (verl@1dda039b:verl/trainer/ppo/core_algos.py::agg_loss; reported in volcengine/verl #4360 and #5417), so the Dr. GRPO constant becomes whatever width the batch was padded to: the same rollouts give a different loss when collated with a longer response, and no batch gives the declared L_max = 1024 (and a batch padded to 0 tokens divides by 0). The row sums are selected with torch.where and D counts the rows with a token (verl's default global_batch_size), so the padded width is the only bug. Wrong when: one row [2, 2] fully selected, padded to 3 tokens -> 4/3 instead of 4/1024."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "nonempty"
L_MAX = 1024
EXPLAINS = "padded width"
import torch


def loss_normalization(token_losses, token_mask, loss_scale_factor=None):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    seq_losses = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1)
    seq_mask = token_mask.sum(dim=-1) > 0
    global_batch_size = seq_mask.sum().clamp(min=1)  # verl's default: the local rows with a response token
    if loss_scale_factor is None:
        loss_scale_factor = token_mask.shape[-1]  # the bug: the padded width, not the max response length
    return seq_losses.sum() / global_batch_size / loss_scale_factor
