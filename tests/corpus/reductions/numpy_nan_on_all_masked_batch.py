"""A NumPy port of the unfloored token mean, `Σ loss·mask / Σ mask` (the dapo normalizer without TRL's clamp, unslothai/unsloth-zoo #1286; OpenRLHF's default masked_mean is unguarded the same way, openrlhf@3c3be623:openrlhf/models/loss.py::aggregate_loss): on an all-masked batch, or a batch of no rows, it is 0/0 = NaN (NumPy only warns). Selection uses np.where, so the empty batch is the only bug. Wrong when: mask all false -> NaN instead of 0."""
FRAMEWORK = "numpy"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
import numpy as np


def loss_normalization(token_losses, token_mask):
    acc = np.float64 if token_losses.dtype == np.float64 else np.float32
    total = np.where(token_mask, token_losses, 0).astype(acc).sum()
    with np.errstate(invalid="ignore"):
        return np.asarray(total / token_mask.sum(), dtype=acc)  # the bug: no floor on the count
