"""Bug, rank form: the step's token count is all-reduced with AVG instead of SUM over the data-parallel group,
so every rank divides by the mean per-rank count N / R and the step's loss and gradients are R times too large
(the all-reduce's op mistaken for the loss's mean over ranks; NCCL has ReduceOp.AVG, gloo does not, so AVG is
written as SUM / world size, which is what it computes). The collective is there and the x dp_size against DDP's
mean is right, so the op is the only bug; the mistake the canonical `global_normalizers` rules out with SUM
(impls/torch_eager_accumulation.py). Wrong when: two ranks of one token each, [1] and [3] -> 4 / 1 instead of
4 / 2 = 2."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
DP_REDUCE = "mean"
RANKS = True
EXPLAINS = "or its count (of tokens or rows) all-reduced with AVG where SUM is meant"
import torch
import torch.distributed as dist


def loss_normalization(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    dp_size = dist.get_world_size(group)
    count = torch.zeros((), dtype=torch.float64)
    for mask in step_masks:
        count += mask.sum()
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
    num_tokens = count / dp_size  # the bug: ReduceOp.AVG (SUM / world size on gloo), the mean count of a rank
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / num_tokens.clamp(min=1).to(acc) * dp_size).to(token_losses.dtype)
