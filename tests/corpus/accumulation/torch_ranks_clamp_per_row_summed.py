"""Bug, rank form: the step's token count is all-reduced over the group but each sample's count is clamped to 1
before it is summed, `num_tokens = sum_i clamp_min(n_i, 1)` (miles #2796, slime@624b824a:slime/backends/
megatron_utils/loss.py, l.1317), so every fully masked sample (a truncated or filtered rollout) adds a phantom
token to N and the step's token mean is too small whenever some micro-batch holds an empty row. The all-reduce
is SUM and the x dp_size against DDP's mean is right. Wrong when: one rank, rows [2] and [] -> 2 / 2 = 1
instead of 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
RANKS = True
EXPLAINS = "clamp(min=1)"
import torch
import torch.distributed as dist


def loss_normalization(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    count = torch.zeros((), dtype=torch.float64)
    for mask in step_masks:
        count += mask.sum(dim=-1).clamp(min=1).sum()  # the bug: an empty sample counts as one token
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / count.clamp(min=1).to(acc) * dist.get_world_size(group)).to(token_losses.dtype)
