"""Bug: no reduction over the sequence group at all: each rank treats its token slice as the whole row.

Written for data parallelism only, then run with sequence parallelism: the per-row values are those of the
rank's slice, and N and D sum slices instead of rows. Right on meshes with one sequence rank; shows on any
mesh with more than one.
"""

FRAMEWORK = "torch"
EXPECT = "reject"

import torch
import torch.distributed.nn.functional as dist_nn


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    sums = torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate)  # BUG: never reduced
    counts = token_mask.sum(-1, dtype=accumulate)
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    numerator, denominator = dist_nn.all_reduce(torch.stack([summed.abs().sum(), averaged.abs().sum()]))
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
