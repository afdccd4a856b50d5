"""Correct token-sum (verl's `agg_loss` token-sum, `masked_sum` with no divisor, verl@1dda039b:verl/trainer/ppo/core_algos.py::agg_loss; SkyRL's `reduce_loss`, skyrl@a9564572:skyrl/backends/skyrl_train/utils/ppo_utils.py): `masked_select` keeps only the selected tokens, so the padding is never read at all and works on any strides; the sum runs in float32 (float64 stays float64). An empty selection sums to 0 and its backward scatters zeros."""
FRAMEWORK = "torch"
EXPECT = "accept"
CONTRACT = "reduction"
REDUCTION = "token-sum"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    return token_losses.masked_select(token_mask).to(acc).sum()
