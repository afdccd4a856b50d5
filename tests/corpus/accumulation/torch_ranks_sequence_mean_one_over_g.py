"""Correct seq-mean-token-mean over the rows with a selected token on DDP ranks whose backward is scaled by 1/G
(DeepSpeed-style accumulation), the rank form: the step's D (the rows of the rank's micro-batches with a selected
token) all-reduced with SUM over the group, as NeMo-RL's global_valid_seqs
(nemo-rl@7ea279ab:nemo_rl/models/policy/workers/dtensor_policy_worker.py, l.660-676) and ROLL's per-key B+; each
micro-batch's sum of floored row means divided by it, then multiplied by dp_size x G once (ROLL's and Megatron's
loss_scale = num_microbatches x dp_size) against DDP's mean and the 1/G. Counts in int64 (exact), D = 0
guarded, selection by torch.where, sums in float32."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-mean"
ROWS = "nonempty"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1/G"
RANKS = True
import torch
import torch.distributed as dist


def loss_normalization(token_losses, token_mask, *, step_masks, group, accumulation_steps):
    rows = torch.zeros((), dtype=torch.int64)
    for mask in step_masks:
        rows += mask.any(dim=-1).sum()
    dist.all_reduce(rows, op=dist.ReduceOp.SUM, group=group)  # the step's D over every rank
    num_sequences = int(rows.item())
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    row_sums = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1)
    row_means = row_sums / token_mask.sum(dim=-1).to(acc).clamp(min=1)
    scale = dist.get_world_size(group) * accumulation_steps  # x dp_size x G, once
    return (row_means.sum() / max(num_sequences, 1) * scale).to(token_losses.dtype)
