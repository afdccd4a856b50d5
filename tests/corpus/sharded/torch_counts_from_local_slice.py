"""Bug: each row's token count is taken on the rank's own token slice, not over the whole row.

The partial sums are all-reduced over the sequence group, the counts are not: token_averaged divides the
full row sum by the number of selected tokens in this rank's slice. Shows on meshes with more than one
sequence rank for any row with selected tokens on more than one slice (the replicas then disagree too).
"""

FRAMEWORK = "torch"
EXPECT = "reject"

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    sums = dist_nn.all_reduce(torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate),
                              group=sequence_group)
    counts = token_mask.sum(-1, dtype=accumulate)  # BUG: the local slice's count
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    weight = 1.0 if dist.get_rank(sequence_group) == 0 else 0.0
    numerator, denominator = dist_nn.all_reduce(torch.stack([summed.abs().sum(), averaged.abs().sum()]) * weight)
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
