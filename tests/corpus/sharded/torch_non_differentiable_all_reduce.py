"""Gradient bug: torch.distributed.all_reduce (in place, invisible to autograd) in the forward pass.

The forward values are exactly right. Autograd sees the all-reduce as the identity, so each rank's
gradient only has its own replica's share: the log-prob gradients miss the other sequence ranks'
cotangents and every rank's share of the ratio's. Found only by --gradients, on any mesh of more than one
rank. Use torch.distributed.nn.functional.all_reduce (differentiable) instead.
"""

FRAMEWORK = "torch"
EXPECT = "reject-gradients"

import torch
import torch.distributed as dist


def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
    accumulate = torch.promote_types(token_log_probs.dtype, torch.float32)
    both = torch.stack([torch.where(token_mask, token_log_probs, 0).sum(-1, dtype=accumulate),
                        token_mask.sum(-1, dtype=accumulate)])
    dist.all_reduce(both, group=sequence_group)  # BUG: not differentiable
    sums, counts = both[0], both[1]
    summed = advantages.to(accumulate) * sums
    averaged = summed / counts.clamp(min=1)
    weight = 1.0 if dist.get_rank(sequence_group) == 0 else 0.0
    terms = torch.stack([summed.abs().sum(), averaged.abs().sum()]) * weight
    dist.all_reduce(terms)  # BUG: not differentiable
    numerator, denominator = terms[0], terms[1]
    ratio = torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 0)
    return {"sequence_summed": summed.to(token_log_probs.dtype),
            "token_averaged": averaged.to(token_log_probs.dtype),
            "magnitude_ratio": ratio.to(token_log_probs.dtype)}
