"""A NumPy port of the per-sequence mean that sums each row in the losses' own dtype: NumPy's `sum` of an ml_dtypes bfloat16 array accumulates in bfloat16 (one rounding per added token: bfloat16 keeps 8 significant bits), where torch's CPU and CUDA sums of half tensors accumulate in float32, so the port loses what the original kept (NumPy's float16 sum adds in float32 and rounds once, which the contract allows). The count and the division are right, and the result is cast to float32. Not from one report: the classic low-precision accumulator of a port. Wrong when: bfloat16, one row of 512 selected tokens of mixed small integers -> the row's sum off by several units."""
FRAMEWORK = "numpy"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
EXPLAINS = "a sum kept in"
import numpy as np


def loss_normalization(token_losses, token_mask):
    acc = np.float64 if token_losses.dtype == np.float64 else np.float32
    row_sums = np.where(token_mask, token_losses, 0).sum(axis=-1)  # the bug: summed in the input dtype
    counts = token_mask.sum(axis=-1)
    row_means = np.where(counts > 0, row_sums.astype(acc) / np.maximum(counts, 1).astype(acc), 0)
    return np.asarray(row_means.sum(dtype=acc) / max(token_mask.shape[0], 1), dtype=acc)
