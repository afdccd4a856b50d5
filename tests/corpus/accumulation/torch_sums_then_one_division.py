"""Correct seq-mean-token-sum-norm (Dr. GRPO's fixed length, L_max = 1024) over the rows with a selected token,
written as the (sum, denominator) pair tunix's `aggregate_loss` returns (tunix@c7d8950f:tunix/rl/common.py) and
divided once at the end, as tunix's trainer divides the summed gradients by the summed denominators
(tunix@c7d8950f:tunix/sft/peft_trainer.py, l.517-584): here the denominator is the step's, D = `num_sequences`
(counted over every micro-batch of every rank) times the declared L_max, and the compensation against DDP's mean
over ranks is folded into the one division (denominator / dp_size), so each micro-batch's loss is still its
share of the step's. L_max is the declared constant, never the micro-batch's padded width (verl #4360, #5417).
The division is zero-safe (D = 0: every sum is 0) and selection is by torch.where, sums in float32."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "nonempty"
L_MAX = 1024
DP_REDUCE = "mean"
BACKWARD_SCALE = "1"
import torch


def aggregate_loss(per_token_loss, completion_mask, *, num_sequences, norm):
    acc = torch.promote_types(per_token_loss.dtype, torch.float32)
    unreduced_sum = torch.where(completion_mask, per_token_loss.to(acc), 0.0).sum()
    denominator = torch.tensor(float(num_sequences) * norm, dtype=acc)  # the step's D x L_max, not the chunk's
    return unreduced_sum, denominator


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    unreduced_sum, denominator = aggregate_loss(token_losses, token_mask, num_sequences=num_sequences, norm=L_MAX)
    share = denominator / dp_size  # DDP averages the ranks: each rank's share is dp_size times its part
    loss = torch.where(share > 0, unreduced_sum / share.clamp(min=1e-30), 0.0)
    return loss.to(token_losses.dtype)
