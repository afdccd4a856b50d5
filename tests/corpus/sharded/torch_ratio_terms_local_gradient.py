"""Bug (gradients only): N and D summed over the data group by value only. After the sequence reduction each rank holds
its rows' full values; it sums their magnitudes, all-reduces a copy over the data group and attaches the local graph
to it with a difference that is exactly 0 (`total + (local - local.detach())`), a trick to keep the global values
while sparing the backward a collective. The forward is the all-reduced total, the same bits on every rank, but the
ratio's gradient on each rank now sees only its own data rank's cotangent: the other data ranks' contributions
through N and D never arrive. It shows only with a nonzero ratio cotangent on two or more data ranks that each hold
rows with tokens: one data rank (any number of sequence ranks), or the vectors' cotangents alone, give the right
gradients.
"""

FRAMEWORK = "torch"
EXPECT = "reject-gradients"

import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

warnings.filterwarnings("ignore", message=".*torch.distributed.nn.*")


def _summed_by_value(local, group):
    total = local.detach().clone()
    dist.all_reduce(total, group=group)
    return total + (local - local.detach())


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    sums = dist_nn.all_reduce(torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate),
                              group=sequence_group)
    counts = dist_nn.all_reduce(token_mask.sum(-1, dtype=accumulate), group=sequence_group)
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    numerator = _summed_by_value(summed.abs().sum(), data_group)
    denominator = _summed_by_value(averaged.abs().sum(), data_group)
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
