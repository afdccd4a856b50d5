"""Correct: the row sums and the counts all-reduced separately over the sequence group, then N and D
separately over the data group.

After the sequence reduction every rank of a sequence group holds the same full rows, so reducing N and D
over the data group (not over every rank) counts each row exactly once, and every rank gets the global
values. Differentiable collectives throughout.
"""

FRAMEWORK = "torch"
EXPECT = "accept"

import warnings

import torch
import torch.distributed.nn.functional as dist_nn

warnings.filterwarnings("ignore", message=".*torch.distributed.nn.*")


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    sums = dist_nn.all_reduce(torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate),
                              group=sequence_group)
    counts = dist_nn.all_reduce(token_mask.sum(-1, dtype=accumulate), group=sequence_group)
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    numerator = dist_nn.all_reduce(summed.abs().sum(), group=data_group)
    denominator = dist_nn.all_reduce(averaged.abs().sum(), group=data_group)
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
