"""Correct token-mean on data-parallel ranks under DDP, the rank form: the step's N is counted over the rank's
micro-batch masks `step_masks` (its whole mini-batch, before the micro-batch loop) and all-reduced with SUM over
the data-parallel group, as verl's engine all-reduces `batch_num_tokens` before the micro split
(verl@1dda039b:verl/workers/engine/fsdp/transformer_impl.py, l.705-711) and NeMo-RL its global_valid_toks; each
micro-batch's masked sum is divided by that N and multiplied by the group's size against DDP's mean over ranks.
The counts are exact integers in float64 (no gradient flows through the collective), N = 0 on every rank is
guarded, selection by torch.where, the sum in float32."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1"
RANKS = True
import torch
import torch.distributed as dist


def global_token_count(step_masks, group):
    count = torch.zeros((), dtype=torch.float64)
    for mask in step_masks:
        count += mask.sum()
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)  # the step's N over every rank
    return int(count.item())


def loss_normalization(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    num_tokens = global_token_count(step_masks, group)
    dp_size = dist.get_world_size(group)
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / max(num_tokens, 1) * dp_size).to(token_losses.dtype)
