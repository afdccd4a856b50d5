"""Bug, rank form: the step's token count is gathered over every rank and micro-batch, as it should be, but from
another mask than the one the losses are reduced with: every position of the padded micro-batches
(`mask.numel()`, the completions' attention mask before the loss mask drops truncated completions and holes),
as TRL counted `num_items_in_batch` before truncated completions were masked (TRL #6369). N is too large
wherever a micro-batch has a masked position, so the loss is too small. The SUM all-reduce and the x dp_size are
right. Wrong when: one rank, one row [2, pad] -> 2 / 2 = 1 instead of 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
RANKS = True
EXPLAINS = "taken over all"
import torch
import torch.distributed as dist


def loss_normalization(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    count = torch.zeros((), dtype=torch.float64)
    for mask in step_masks:
        count += mask.numel()  # the bug: all positions, not the loss mask's selected tokens
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / count.clamp(min=1).to(acc) * dist.get_world_size(group)).to(token_losses.dtype)
