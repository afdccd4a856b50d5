"""A per-sample loop whose running total stays in the input dtype: each row's selected sum is right (torch sums
float16 and bfloat16 in float32 and rounds once), but `total = total + row.sum()` rounds the batch's sum in float16
once per row, a half-precision sum over the rows. The pattern of prime-rl's packed-sequence loss, a loop over the
samples adding each one's loss to `total_loss` in the log-probs' dtype (PrimeIntellect-ai/prime-rl@008468c1,
src/prime_rl/trainer/rl/loss.py::compute_loss). Over a few rows its error mostly stays within the contract's
allowance; over thousands of rows of similar values the total stalls (the fixed case of 4096 rows)."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
EXPLAINS = "the batch's sum accumulated in float16 one position at a time"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    selected = torch.where(token_mask, token_losses, 0)
    total = selected[:0].sum()  # 0 in the input dtype, connected to token_losses
    for row in selected:
        total = total + row.sum()  # the bug: the running total is rounded to the input dtype at every row
    return total.to(acc) / token_mask.sum().clamp(min=1)
