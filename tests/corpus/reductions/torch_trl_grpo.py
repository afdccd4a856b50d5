"""Correct TRL-style grpo loss (loss_type="grpo": each completion's token mean, then the mean over all B completions, empty ones included: `mean_i[Σ_t ℓm / clamp(n_i, 1)]`, trl@f2cd5771:trl/trainer/grpo_trainer.py::_compute_loss, l.3124-3150), the branch the suite names grpo = seq-mean-token-mean with rows=all. The four loss_type branches are TRL's formulas with two rewrites the contract needs: the losses are selected with torch.where instead of multiplied by completion_mask (so -inf/NaN padding never enters), and grpo's `.mean()` over completions is a sum divided by max(B, 1) (a batch of no completions is 0, not NaN). Sums in float32 (float64 stays float64); gradient accumulation is one step here, so TRL's / current_gradient_accumulation_steps divides by 1."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "grpo"
ROWS = "all"
import torch

LOSS_TYPE = "grpo"
MAX_COMPLETION_LENGTH = 1024


def compute_loss(per_token_loss, completion_mask, loss_type, max_completion_length=MAX_COMPLETION_LENGTH,
                 num_items_in_batch=None, gradient_accumulation_steps=1, num_processes=1):
    acc = torch.promote_types(per_token_loss.dtype, torch.float32)
    masked = torch.where(completion_mask, per_token_loss.to(acc), 0.0)
    if loss_type in ("grpo", "sapo"):
        seq_loss = masked.sum(-1) / completion_mask.sum(-1).clamp(min=1)
        loss = seq_loss.sum() / max(per_token_loss.size(0), 1)
        loss = loss / gradient_accumulation_steps
    elif loss_type == "bnpo":
        loss = masked.sum() / completion_mask.sum().clamp(min=1)
        loss = loss / gradient_accumulation_steps
    elif loss_type == "dr_grpo":
        loss = masked.sum() / (max(per_token_loss.size(0), 1) * max_completion_length)
        loss = loss / gradient_accumulation_steps
    elif loss_type in ("dapo", "cispo"):
        if num_items_in_batch is None:
            num_items_in_batch = completion_mask.sum()
        normalizer = num_items_in_batch.clamp(min=1) / num_processes
        loss = masked.sum() / normalizer
    else:
        raise ValueError(f"Unknown loss type: {loss_type}")
    return loss


def loss_normalization(token_losses, token_mask):
    return compute_loss(token_losses, token_mask, LOSS_TYPE)
