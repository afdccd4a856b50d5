"""The canonical NumPy loss reduction: float16, ml_dtypes.bfloat16, float32 and float64, any strides.

    loss = loss_reduction(token_losses, token_mask, mode="seq-mean-token-mean", rows="all")

`token_losses` (batch, tokens) is the per-token loss (advantage folded in), `token_mask` (batch, tokens) bool;
any strides, negative and zero ones included. The loss is a 0-d array: float32 for half inputs, else the input
dtype. The modes (reference/reduction.py has them exactly): token-mean (sum / N), seq-mean-token-mean (the mean
over D rows of each row's mean), seq-mean-token-sum-norm (sum / (D L_max)), seq-mean-token-sum (sum / D),
token-sum; D is every row (rows="all", the book's 1/B) or the rows with a selected token (rows="nonempty";
rows=None, the default: every row, or the convention of the trainer whose name `mode` is spelled with,
reference/reduction.py's TRAINER_CONVENTIONS). No autograd: NumPy has none.

The same choices as impls/torch_eager_reduction.py, each for the bug it prevents:
- one pass over cache-sized row blocks, taken by the threads one block at a time (a thread that the machine's
  other load holds up takes fewer, rather than the others waiting for its fixed share): each block's mask
  becomes 0/1 words that select the losses' bits by an integer multiply (or all-ones words and an AND), so
  unselected values become +0.0 whatever they held: -inf or NaN padding never reaches the loss (verl #6349),
  and no float 0 * inf makes a NaN; half inputs are summed with an explicit float32 accumulator, since NumPy
  sums a bfloat16 array in bfloat16 (a running sum sticks at 256);
- counts are integers, exact, counted from the mask while its block is in cache, and only those the mode reads:
  N (token-mean) in int64 from the whole block, a count per row only where a row's mean or D = B+ needs it.
  N and D are counted from the mask, never from the shape (the padded width is not a length, verl #4360);
  L_max is the declared constant, never `token_mask.shape[-1]`;
- after the row pass only the batch's B row sums are left: they are widened to float64 (B values: free), so
  the batch sum, the per-row means and the division by an exact N or D round in float64, and the loss is
  rounded once, to float32 for half inputs (trainers keep their loss there) or to the input dtype;
- every divisor is clamped to 1 before dividing: an all-masked batch gives exactly 0, not 0/0 with a
  RuntimeWarning (unsloth-zoo #1286); no `+ 1e-8` in a denominator (in float64 it is a visible bias).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from impls.cores import usable_cores
from impls.numpy_impl import _HIGH_HALF, BFLOAT16, BLOCK_ELEMENTS, THREADED_ELEMENTS, _describe, _thread_pool
from impls.validation import validate_inputs
from reference.reduction import CONTRACT as REDUCTION

_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}  # a word of the losses' width


def validate(token_losses: np.ndarray, token_mask: np.ndarray, mode: str, rows: str | None,
             l_max: float | None) -> dict[str, object]:
    """The inputs checked (metadata only) and the declared parameters as the contract reads them (aliases
    resolved; ValueError naming a wrong one)."""
    validate_inputs(REDUCTION, (token_losses, token_mask), describe=_describe, kind="numpy.ndarray", noun="array")
    return REDUCTION.canonical_parameters({"mode": mode, "rows": rows, "l_max": l_max})


@dataclass
class RowPass:
    """What one pass over the tokens gives: each row's selected sum, each row's count (only where asked for),
    and N, the batch's count."""

    sums: np.ndarray
    counts: np.ndarray | None
    tokens: int


class _Scratch:
    """One thread's block-sized buffers, made once per call (a block is a few MB: they stay in cache)."""

    def __init__(self, rows: int, tokens: int, dtype: np.dtype) -> None:
        self.words = np.empty((rows, tokens), dtype=_UNSIGNED[dtype.itemsize])
        # half inputs are summed in float32; bfloat16 writes only the high halves of these, so they start at 0
        self.wide = np.zeros((rows, tokens), dtype=np.float32) if dtype.itemsize == 2 else None


def _select(bits: np.ndarray, mask: np.ndarray, words: np.ndarray, out: np.ndarray) -> None:
    """`out` = the losses' bits where selected, 0 elsewhere. The mask becomes 0/1 words (whatever byte a True
    holds); multiplying the bits by them as integers keeps them or clears them, exactly, in the pass that reads
    the losses. AVX2 has no 64-bit integer multiply: there the 0/1 words are negated to all ones and ANDed."""
    np.copyto(words, mask)
    if words.itemsize == 8:
        np.negative(words, out=words)
        np.bitwise_and(bits, words, out=out)
    else:
        np.multiply(bits, words, out=out)


def _block(losses: np.ndarray, mask: np.ndarray, sums: np.ndarray, counts: np.ndarray | None,
           scratch: _Scratch) -> int:
    """One block of rows in place (`sums`, `counts`); returns its count of selected tokens."""
    words = scratch.words[: len(losses)]
    if counts is not None:
        np.add.reduce(mask, axis=-1, dtype=counts.dtype, out=counts)
    selected = int(np.count_nonzero(mask))  # the block's mask is in cache from here on
    bits = losses.view(words.dtype)
    if scratch.wide is None:  # float32 / float64: sum the selected words as they are
        _select(bits, mask, words, words)
        np.einsum("ij->i", words.view(losses.dtype), out=sums)
        return selected
    values = scratch.wide[: len(losses)]
    if losses.dtype == BFLOAT16:  # bfloat16 is the top half of a float32: place its bits there
        _select(bits, mask, words, values.view(np.uint16)[:, _HIGH_HALF::2])
    else:  # float16 needs a real conversion
        _select(bits, mask, words, words)
        np.copyto(values, words.view(losses.dtype))
    np.einsum("ij->i", values, out=sums)
    return selected


def row_pass(losses: np.ndarray, mask: np.ndarray, accumulate: type[np.floating], row_counts: bool) -> RowPass:
    """Each row's selected sum in `accumulate`, its count if `row_counts`, and N: one read of each input."""
    batch, tokens = losses.shape
    count_dtype = np.int32 if tokens < 2**31 else np.int64
    sums = np.zeros(batch, dtype=accumulate)  # every row is written by exactly one block
    counts = np.zeros(batch, dtype=count_dtype) if row_counts else None
    if batch == 0 or tokens == 0:
        return RowPass(sums, counts, 0)
    rows = max(1, min(batch, BLOCK_ELEMENTS // tokens))
    blocks = -(-batch // rows)
    workers = min(usable_cores(), blocks) if batch * tokens >= THREADED_ELEMENTS else 1
    starts = itertools.count(0, rows)  # shared: next() is atomic under the GIL, so each block is taken once
    selected: list[int] = []  # each block's count (list.append is atomic too)

    def work() -> None:
        scratch = _Scratch(rows, tokens, losses.dtype)
        for start in starts:
            if start >= batch:
                return
            stop = min(start + rows, batch)
            selected.append(_block(losses[start:stop], mask[start:stop], sums[start:stop],
                                   None if counts is None else counts[start:stop], scratch))

    if workers == 1:
        work()
    else:  # NumPy releases the GIL inside these loops
        for future in [_thread_pool().submit(work) for _ in range(workers)]:
            future.result()
    return RowPass(sums, counts, sum(selected))


def reduce_rows(found: RowPass, mode: str, rows: str, l_max: float | None) -> np.float64:
    """The loss of a mode in float64 from the rows' sums and the exact integer counts, each divisor clamped
    to 1 before it divides."""
    wide = found.sums.astype(np.float64)
    if mode == "token-sum":
        return wide.sum()
    if mode == "token-mean":
        return wide.sum() / np.float64(max(found.tokens, 1))  # N = 0: every sum is 0, and 0 / 1 = 0
    divisor = np.float64(max(len(wide) if rows == "all" else np.count_nonzero(found.counts), 1))  # B or B+
    if mode == "seq-mean-token-mean":
        return (wide / np.maximum(found.counts, 1)).sum() / divisor  # an empty row's mean: 0 / 1 = 0
    if mode == "seq-mean-token-sum":
        return wide.sum() / divisor
    return wide.sum() / (divisor * l_max)  # seq-mean-token-sum-norm: the declared L_max, never the width


def loss_reduction(token_losses: np.ndarray, token_mask: np.ndarray, *, mode: str = "token-mean",
                   rows: str | None = None, l_max: float | None = None) -> np.ndarray:
    """The scalar loss of `mode` (reference/reduction.py) as a 0-d array; see the module docstring."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    mode, rows = str(declared["mode"]), str(declared["rows"])
    accumulate = np.float64 if token_losses.dtype == np.float64 else np.float32
    # a count per row only where a row's mean (seq-mean-token-mean) or D = B+ reads it (the contract keeps
    # rows="nonempty" only for the modes that divide by D)
    row_counts = mode == "seq-mean-token-mean" or rows == "nonempty"
    found = row_pass(token_losses, token_mask, accumulate, row_counts)
    loss = reduce_rows(found, mode, rows, declared["l_max"])
    return np.asarray(loss, dtype=accumulate).reshape(())
