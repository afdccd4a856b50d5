"""A per-sequence mean divided by the number of samples twice: each sequence's token mean is pre-scaled by 1/global_valid_samples (so micro-batches can be summed) and the batch sum is then divided by global_valid_samples again, the double normalization of ROLL commit d8d7e78f (alibaba/ROLL; its agg_loss is roll/utils/functionals.py, roll@8eb27cc2, l.229-282). The loss is 1/B of the intended one, so the effective learning rate shrinks with the batch. Wrong when: two rows [2] and [4], rows=all -> 1.5/2 = 0.75 instead of 1.5."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
ROWS = "all"
EXPLAINS = "twice"
import torch


def loss_normalization(token_losses, token_mask, global_valid_samples=None):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    lengths = token_mask.sum(dim=-1)
    seq_losses = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1) / lengths.clamp(min=1)
    if global_valid_samples is None:
        global_valid_samples = max(token_mask.shape[0], 1)
    seq_losses = seq_losses / global_valid_samples  # weighted by the global sample count...
    return seq_losses.sum() / global_valid_samples  # ...and the bug: divided by it again
