"""Correct fixed-length loss (Dr. GRPO's `Σℓm / (B · max_completion_length)`, TRL's dr_grpo, trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss; SkyRL's seq_mean_token_sum_norm, 1/(B·max_seq_len)) for bfloat16/float16 training: the losses are upcast to float32 once (float64 stays float64), everything (the where-selection, the sum, the division by B and the constant L_max) happens there, and the loss is cast back to the input dtype once at the end, one rounding, as a trainer does to keep the loss in the model's dtype. L_max is the declared constant, never the padded width; B is floored at 1."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum-norm"
ROWS = "all"
L_MAX = 1024
import torch

MAX_COMPLETION_LENGTH = 1024


def loss_normalization(token_losses, token_mask, max_completion_length=MAX_COMPLETION_LENGTH):
    losses = token_losses.to(torch.promote_types(token_losses.dtype, torch.float32))  # upcast once
    masked_sum = torch.where(token_mask, losses, 0.0).sum()
    loss = masked_sum / (max(token_mask.shape[0], 1) * max_completion_length)
    return loss.to(token_losses.dtype)  # cast once
