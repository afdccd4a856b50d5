"""Bug, rank form: each rank counts the selected tokens of its own micro-batches and never all-reduces the count
over the data-parallel group, so it divides its sum by its own N_r where the step's N is meant; with x dp_size
against DDP's mean, the step's loss is sum_r S_r / N_r, R times the loss when the ranks hold equal counts and
another value otherwise. The all_reduce that verl (batch_num_tokens), NeMo-RL (global_valid_toks) and
open-instruct make before the micro-batch loop, left out; a new user's planted bug, which the report named only
as the coincident "mean of micro-batch means" or "dp_size where summed" until each rank's own count was a
candidate. Wrong when: two ranks of one token each, [1] and [3] -> 1 / 1 + 3 / 1 = 4 instead of 4 / 2 = 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
RANKS = True
EXPLAINS = "not the step's all-reduced over the ranks"
import torch
import torch.distributed as dist


def loss_normalization(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    dp_size = dist.get_world_size(group)
    num_tokens = sum(int(mask.sum()) for mask in step_masks)  # the bug: this rank's count, not all-reduced
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / max(num_tokens, 1) * dp_size).to(token_losses.dtype)
