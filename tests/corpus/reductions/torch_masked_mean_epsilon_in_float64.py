"""Guards the token mean with `+ 1e-8` in the denominator, as NeMo-RL's `masked_mean` does (`Σ(values·mask) / (global_valid_toks + 1e-8)`, nemo-rl@7ea279ab:nemo_rl/algorithms/utils.py::masked_mean, l.212; OpenRLHF divides by `n_i + 1e-8` the same way, openrlhf@3c3be623:openrlhf/models/loss.py::aggregate_loss). In float32 the epsilon vanishes (N + 1e-8 rounds to N), but in float64 it is a relative error of 1e-8/N, tens of millions of float64 roundings: a float64 reference run disagrees with the formula it claims. Wrong when: float64, one selected token 1.0 -> 0.99999999 instead of 1."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
EXPLAINS = "an epsilon added to the token count"
import torch


def masked_mean(values, mask, global_normalization_factor=None):
    acc = torch.promote_types(values.dtype, torch.float32)
    mask = mask.to(acc)
    normalization_factor = mask.sum() if global_normalization_factor is None else global_normalization_factor
    return torch.where(mask.bool(), values.to(acc), 0.0).sum() / (normalization_factor + 1e-8)  # the bug: + 1e-8


def loss_normalization(token_losses, token_mask):
    return masked_mean(token_losses, token_mask)
