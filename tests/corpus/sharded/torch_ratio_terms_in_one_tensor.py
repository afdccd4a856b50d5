"""Correct: sums and counts in one tensor, one all-reduce over the sequence group; then the ratio's N and
D in one tensor, one all-reduce over every rank (the default group), each row counted once by letting
only sequence rank 0 contribute it.
"""

FRAMEWORK = "torch"
EXPECT = "accept"

import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

warnings.filterwarnings("ignore", message=".*torch.distributed.nn.*")


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    local = torch.stack([torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate),
                         token_mask.sum(-1, dtype=accumulate)])
    sums, counts = dist_nn.all_reduce(local, group=sequence_group)
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    first = 1.0 if dist.get_rank(sequence_group) == 0 else 0.0
    numerator, denominator = dist_nn.all_reduce(torch.stack([summed.abs().sum(), averaged.abs().sum()]) * first)
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
