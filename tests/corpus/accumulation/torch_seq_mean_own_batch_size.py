"""Bug: a sequence-mean-token-mean over every row that divides each micro-batch's sum of row means by the
micro-batch's own row count B_k, `row_means.mean()`, where the step's D = `num_sequences` is needed: a sum of
micro-batch sequence means, which weighs the rows of a small micro-batch more (the per-sample form of verl
#6957's and NeMo-RL #3791's mean of micro-batch means; slime and ROLL scale the sample mode by the global batch
size for this reason). Row means are selected and floored, the empty micro-batch gives 0, x dp_size is right.
Wrong when: one rank, micro-batches of one row [1] and two rows [3], [3] -> 1 + 3 = 4 instead of 7 / 3."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "seq-mean-token-mean"
ROWS = "all"
EXPLAINS = "mean of micro-batch means"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    row_sums = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1)
    row_means = row_sums / token_mask.sum(dim=-1).clamp(min=1)
    loss = row_means.sum() / max(token_mask.shape[0], 1)  # the bug: the micro-batch's own B, not num_sequences
    return (loss * dp_size).to(token_losses.dtype)
