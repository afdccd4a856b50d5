"""Declares seq-mean-token-sum but divides each row's token sum by its length: the seq-mean-token-sum branch of verl's `agg_loss` computed a per-sequence token mean (reported in volcengine/verl #931), so long responses are weighted like short ones, which is exactly what seq-mean-token-sum (Σ_t per sequence, then the mean over sequences) exists to avoid. Selection, counts and the 1/B are right: the result is seq-mean-token-mean. Wrong when: two rows [1, 1] and [1], rows=all -> (1 + 1)/2 = 1 instead of (2 + 1)/2 = 1.5."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum"
ROWS = "all"
EXPLAINS = "seq-mean-token-mean (rows=all), where seq-mean-token-sum is declared"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    seq_losses = torch.where(token_mask, token_losses.to(acc), 0.0).sum(dim=-1)
    seq_losses = seq_losses / token_mask.sum(dim=-1).clamp(min=1)  # the bug: a token mean per sequence
    return seq_losses.sum() / max(token_mask.shape[0], 1)
