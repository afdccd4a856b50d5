"""Correct seq-mean-token-sum over every row under a trainer that scales each micro-batch's backward by 1/G
(DeepSpeed's gradient accumulation, the HF Trainer with `model_accepts_loss_kwargs=False`): the micro-batch's
masked sum divided by the step's D = `num_sequences` is already its share of the step's loss, so it is
multiplied by G to cancel the 1/G, and by dp_size against DDP's mean over ranks, as OpenRLHF pre-compensates
DeepSpeed's 1/gas (openrlhf@3c3be623:openrlhf/utils/loss_utils.py::iter_grad_accum_global_norm) and Megatron
trainers set loss_scale = num_microbatches x dp_size (ROLL, slime): the compensation applied once, not the 1/G
twice of TRL #5619 and ms-swift #10117. Selection by torch.where, the sum in float32, D = 0 guarded."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-sum"
ROWS = "all"
DP_REDUCE = "mean"
BACKWARD_SCALE = "1/G"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    loss = loss_sum / max(num_sequences, 1)
    return (loss * (dp_size * accumulation_steps)).to(token_losses.dtype)  # x dp_size x G, once
