"""Bug: the row sums are all-reduced with AVG where SUM is needed.

Averaging both the sums and the counts over the sequence group leaves token_averaged right (the factor
cancels) but divides sequence_summed by the number of sequence ranks. gloo has no ReduceOp.AVG, so the
average is written as SUM / group size, which is what AVG does on NCCL. Shows on meshes with more than one
sequence rank.
"""

FRAMEWORK = "torch"
EXPECT = "reject"

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    local = torch.stack([torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate),
                         token_mask.sum(-1, dtype=accumulate)])
    sums, counts = dist_nn.all_reduce(local, group=sequence_group) / dist.get_world_size(sequence_group)  # BUG: AVG
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1e-30)  # counts are averages now; empty rows give 0 / tiny = 0
    weight = 1.0 if dist.get_rank(sequence_group) == 0 else 0.0
    numerator, denominator = dist_nn.all_reduce(torch.stack([summed.abs().sum(), averaged.abs().sum()]) * weight)
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
