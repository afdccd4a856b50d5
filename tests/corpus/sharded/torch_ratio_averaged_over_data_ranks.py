"""Bug: the ratio is computed per data-parallel rank and then averaged over the data ranks.

Each data rank has the right partial N and D of its own rows, and divides them; the mean of those
ratios is not the ratio of the sums (sum N_d / sum D_d). Shows on meshes with more than one data rank
whenever the ranks' ratios differ (rows of different lengths or advantages on different ranks).
"""

FRAMEWORK = "torch"  # check --sharded torch
EXPECT = "reject"

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    sums = torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate)
    counts = token_mask.sum(-1, dtype=accumulate)
    sums, counts = dist_nn.all_reduce(torch.stack([sums, counts]), group=sequence_group)
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    numerator, denominator = summed.abs().sum(), averaged.abs().sum()
    local_ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    ratio = dist_nn.all_reduce(local_ratio, group=data_group) / dist.get_world_size(data_group)  # BUG
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
