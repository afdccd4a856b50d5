"""The canonical formulation in NumPy: float16, ml_dtypes.bfloat16, float32 and float64.

NumPy sums a bfloat16 array in bfloat16 (5000 values in [-1, 0) sum to -256), so half inputs are summed
with an explicit float32 accumulator. Negative and zero strides are fine: nothing here assumes a layout.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from impls.cores import usable_cores
from impls.validation import ArrayInfo, validate_inputs
from reference.dtypes import dtype_name, numpy_dtype
from reference.magnitude import CONTRACT as MAGNITUDE


def _describe(value: object) -> ArrayInfo | None:
    if not isinstance(value, np.ndarray):
        return None
    return ArrayInfo(value.shape, dtype_name(value.dtype), "cpu")


BFLOAT16 = numpy_dtype("bfloat16")


# Row blocks of about this many elements: a block's log-probs, mask and scratch (a few MB) stay in cache;
# smaller blocks lose more to per-call overhead and GIL hand-offs between the threads than they gain.
BLOCK_ELEMENTS = 1 << 19
# Below this many elements threads cost more than they save.
THREADED_ELEMENTS = 1 << 18
_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_HIGH_HALF = 1 if sys.byteorder == "little" else 0  # where bfloat16's bits sit inside a float32
_pool: ThreadPoolExecutor | None = None  # made on first use, kept: starting threads per call costs more


def _forget_pool() -> None:  # a forked child inherits the pool object but none of its threads
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _thread_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=usable_cores(), thread_name_prefix="numpy-normalize")
    return _pool


def _block_sums(
    log_probs: np.ndarray, mask: np.ndarray, sums: np.ndarray, counts: np.ndarray, scratch: np.ndarray,
    wide: np.ndarray | None,
) -> None:
    """Selected sums and counts of a few rows, in place, with every pass over cache-resident data.

    Selection is a bitwise AND with the mask widened to all-ones/all-zeros words: unselected values
    become +0.0 whatever they held (-inf and NaN included), with no multiply that could make a NaN.
    """
    rows = len(log_probs)
    selected = scratch[:rows]
    np.add.reduce(mask.view(np.uint8), axis=-1, dtype=counts.dtype, out=counts)
    np.copyto(selected, mask)  # 0 or 1
    np.negative(selected, out=selected)  # 0 or all ones
    if wide is None:  # float32 / float64: sum the selected words as they are
        np.bitwise_and(log_probs.view(selected.dtype), selected, out=selected)
        np.einsum("ij->i", selected.view(log_probs.dtype), out=sums)
        return
    values = wide[:rows]
    if log_probs.dtype == BFLOAT16:  # bfloat16 is the top half of a float32: place its bits there
        np.bitwise_and(log_probs.view(np.uint16), selected, out=values.view(np.uint16)[:, _HIGH_HALF::2])
    else:  # float16 needs a real conversion
        np.bitwise_and(log_probs.view(np.uint16), selected, out=selected)
        np.copyto(values, selected.view(log_probs.dtype))
    np.einsum("ij->i", values, out=sums)


def _selected_sums(
    log_probs: np.ndarray, mask: np.ndarray, accumulate: type[np.floating]
) -> tuple[np.ndarray, np.ndarray]:
    batch, tokens = log_probs.shape
    count_dtype = np.int32 if tokens < 2**31 else np.int64
    if batch == 0 or tokens == 0:
        return np.zeros(batch, dtype=accumulate), np.zeros(batch, dtype=count_dtype)
    sums = np.empty(batch, dtype=accumulate)  # every row is written by exactly one block
    counts = np.empty(batch, dtype=count_dtype)
    rows = max(1, min(batch, BLOCK_ELEMENTS // tokens))
    workers = min(usable_cores(), -(-batch // rows)) if batch * tokens >= THREADED_ELEMENTS else 1

    def work(first: int, last: int) -> None:
        scratch = np.empty((rows, tokens), dtype=_UNSIGNED[log_probs.dtype.itemsize])
        wide = None
        if log_probs.dtype.itemsize == 2:
            wide = np.zeros((rows, tokens), dtype=np.float32)  # bfloat16 writes only the high halves
        for start in range(first, last, rows):
            stop = min(start + rows, last)
            _block_sums(log_probs[start:stop], mask[start:stop], sums[start:stop], counts[start:stop],
                        scratch, wide)

    if workers == 1:
        work(0, batch)
    else:  # NumPy releases the GIL inside these loops: one contiguous band of rows per core
        pool = _thread_pool()
        bands = [batch * k // workers for k in range(workers + 1)]
        for future in [pool.submit(work, bands[k], bands[k + 1]) for k in range(workers)]:
            future.result()
    return sums, counts


def normalize(
    token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray
) -> dict[str, np.ndarray]:
    out_dtype = token_log_probs.dtype
    accumulate = np.float64 if out_dtype == np.float64 else np.float32
    selected_sums, counts = _selected_sums(token_log_probs, token_mask, accumulate)
    sequence_summed = advantages.astype(accumulate) * selected_sums
    token_averaged = sequence_summed / np.maximum(counts, 1).astype(accumulate)
    numerator = np.abs(sequence_summed).sum()
    denominator = np.abs(token_averaged).sum()
    magnitude_ratio = numerator / denominator if denominator > 0 else accumulate(0)
    return {
        "sequence_summed": sequence_summed.astype(out_dtype),
        "token_averaged": token_averaged.astype(out_dtype),
        "magnitude_ratio": np.asarray(magnitude_ratio, dtype=out_dtype).reshape(()),
    }


def sequence_vs_token_normalization(
    token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray
) -> dict[str, np.ndarray]:
    validate_inputs(
        MAGNITUDE, (token_log_probs, advantages, token_mask), describe=_describe, kind="numpy.ndarray", noun="array"
    )
    return normalize(token_log_probs, advantages, token_mask)
