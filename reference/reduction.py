"""The loss reductions: a scalar loss from per-token losses and a mask, in the mode the trainer declares (the
RLHF book, 6.3.2; verl's `agg_loss` modes, TRL's `loss_type`).

`fn(token_losses, token_mask) -> loss`, where `token_losses` (batch, tokens) is the per-token loss with the
advantage already folded in and `loss` a 0-d array. With n_i = sum_t m_it, N = sum_i n_i, B rows, B+ the rows
with n_i > 0, D = B (rows="all") or B+ (rows="nonempty"), S_i = sum_t m_it l_it and T = sum_i S_i:

    token-mean               (per-token)       T / N
    seq-mean-token-mean      (per-sequence)    (1/D) sum_{i: n_i > 0} S_i / n_i
    seq-mean-token-sum-norm  (fixed-length)    T / (D L_max), L_max a declared positive constant
    seq-mean-token-sum                         T / D
    token-sum                                  T

Every zero denominator gives exactly 0 and a gradient that exists and is exactly 0: the loss stays connected to
`token_losses`. d L / d l_it = m_it w_i with w_i = 1/N, 1/(D n_i), 1/(D L_max), 1/D, 1. The loss is in the input
dtype or, for float16 and bfloat16 inputs, in float32 (trainers keep their loss in float32 on purpose).

This module is the whole contract: the exact forward (`math.fsum`), the exact VJP, the tolerance (derived in
docs/tolerance.md, "The loss reductions"), the relations, the input domain, the cotangents, the examples, the
declared parameters and the explanation of a wrong value in the contract's terms.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from reference.case import Case
from reference.contract import (
    ALTERNATIVES,
    Comparison,
    Contract,
    Domain,
    Example,
    Input,
    Output,
    Parameter,
    Relation,
    ValueMenu,
)
from reference.dtypes import (
    HALF_DTYPES,
    accumulation_dtype,
    largest,
    numpy_dtype,
    round_to,
    smallest_subnormal,
    unit_roundoff,
)
from reference.exact import exact_results
from reference.tolerance import CONTRACT, REFERENCE_VECTOR_ERROR, SAFETY, Precision, gamma
from reference.values import draw_values

LOSSES, MASK, LOSS = "token_losses", "token_mask", "loss"
TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN = "token-mean", "seq-mean-token-mean"
SEQ_MEAN_TOKEN_SUM_NORM, SEQ_MEAN_TOKEN_SUM, TOKEN_SUM = "seq-mean-token-sum-norm", "seq-mean-token-sum", "token-sum"
MODES = (TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM, SEQ_MEAN_TOKEN_SUM, TOKEN_SUM)
ROW_MODES = (SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM, SEQ_MEAN_TOKEN_SUM)  # those that divide by D
ROWS = ("all", "nonempty")
# The book's names and the trainers' spellings of the same modes (TRL's loss_type, SkyRL's and tunix's names).
MODE_ALIASES = {
    "per-token": TOKEN_MEAN, "per-sequence": SEQ_MEAN_TOKEN_MEAN, "fixed-length": SEQ_MEAN_TOKEN_SUM_NORM,
    "bnpo": TOKEN_MEAN, "dapo": TOKEN_MEAN, "grpo": SEQ_MEAN_TOKEN_MEAN, "dr_grpo": SEQ_MEAN_TOKEN_SUM_NORM,
    "token_mean": TOKEN_MEAN, "sequence_mean": SEQ_MEAN_TOKEN_MEAN, "seq_mean_token_sum_norm": SEQ_MEAN_TOKEN_SUM_NORM,
    "sequence-mean-token-mean": SEQ_MEAN_TOKEN_MEAN, "sequence-mean-token-sum": SEQ_MEAN_TOKEN_SUM,
    "sequence-mean-token-sum-norm": SEQ_MEAN_TOKEN_SUM_NORM,
}
# A trainer's spelling that names its trainer's convention too, used where `rows` is left undeclared: tunix's
# aggregate_loss (tunix/rl/common.py) divides its sequence-mean-token-mean by the rows with a selected token.
# (Its seq-mean-token-sum does too, but that is verl's name as well, whose D is the global batch size its trainer
# passes, every row: the default stays.)
TRAINER_CONVENTIONS = {"sequence-mean-token-mean": {"rows": "nonempty"}}
# The campaign's fixed length for the built-ins (Dr. GRPO's L_max is the maximum completion length): not a
# power of two, so dividing by it rounds.
CAMPAIGN_L_MAX = 1000.0


# --------------------------------------------------------------------------------------------- exact forward

@dataclass(frozen=True)
class Exact:
    """The exact loss and what the tolerance model and the explanations need (float64, exactly rounded sums)."""

    loss: np.ndarray  # ()
    mode: str
    rows: str
    l_max: float | None
    counts: np.ndarray  # (batch,) int64, n_i
    row_sums: np.ndarray  # (batch,) S_i, each correctly rounded
    magnitudes: np.ndarray  # (batch,) M_i = sum_t m_it |l_it|
    total: float  # T, correctly rounded
    row_means: float  # sum_{n_i > 0} S_i / n_i
    tokens: int  # the padded width

    def outputs(self) -> dict[str, np.ndarray]:
        return {LOSS: self.loss}

    @property
    def batch(self) -> int:
        return len(self.counts)

    @property
    def nonempty(self) -> int:
        return int((self.counts > 0).sum())

    def rows_divisor(self, rows: str | None = None) -> int:
        """D: every row, or the rows with a selected token."""
        return self.batch if (rows or self.rows) == "all" else self.nonempty


def _loss(mode: str, total: float, row_means: float, tokens: int, rows_divisor: int, l_max: float | None) -> float:
    """L of a mode from the exact sums, each step one float64 rounding; 0 where the denominator is 0."""
    if mode == TOKEN_SUM:
        return total
    if mode == TOKEN_MEAN:
        return total / tokens if tokens else 0.0
    if not rows_divisor:
        return 0.0
    if mode == SEQ_MEAN_TOKEN_MEAN:
        return row_means / rows_divisor
    if mode == SEQ_MEAN_TOKEN_SUM:
        return total / rows_divisor
    return total / (rows_divisor * float(l_max))


def reference(token_losses: np.ndarray, token_mask: np.ndarray, mode: str, rows: str = "all",
              l_max: float | None = None) -> Exact:
    """The exact loss of float64 inputs (masked positions may hold anything, inf and NaN included)."""
    losses = np.asarray(token_losses, dtype=np.float64)
    mask = np.asarray(token_mask, dtype=bool)
    if not np.isfinite(losses[mask]).all():
        raise ValueError("token_losses must be finite wherever token_mask is true")
    counts = mask.sum(axis=1, dtype=np.int64)
    row_sums = np.array([math.fsum(row[keep]) for row, keep in zip(losses, mask)], dtype=np.float64).reshape(-1)
    total = math.fsum(losses[mask])
    row_means = math.fsum(s / n for s, n in zip(row_sums, counts) if n > 0)
    magnitudes = np.abs(np.where(mask, losses, 0.0)).sum(axis=1)
    exact = Exact(np.array(0.0), mode, rows, l_max, counts, row_sums, magnitudes, total, row_means, losses.shape[1])
    divisor = exact.rows_divisor()
    loss = _loss(mode, total, row_means, int(counts.sum()), divisor, l_max)
    return Exact(np.array(loss), mode, rows, l_max, counts, row_sums, magnitudes, total, row_means, losses.shape[1])


def exact(case: Case) -> Exact:
    bound = case.contract.bound
    return reference(case.token_losses, case.token_mask, bound["mode"], bound["rows"], bound["l_max"])


def row_weights(expected: Exact) -> np.ndarray:
    """w_i = d L / d S_i for each row (d L / d l_it = m_it w_i), 0 where the denominator is 0."""
    counts, divisor = expected.counts, expected.rows_divisor()
    total_tokens = int(counts.sum())
    ones = np.ones(expected.batch)
    if expected.mode == TOKEN_SUM:
        return ones
    if expected.mode == TOKEN_MEAN:
        return ones / total_tokens if total_tokens else 0 * ones
    if not divisor:
        return 0 * ones
    if expected.mode == SEQ_MEAN_TOKEN_MEAN:
        return np.where(counts > 0, 1.0 / (divisor * np.maximum(counts, 1)), 0.0)
    if expected.mode == SEQ_MEAN_TOKEN_SUM:
        return ones / divisor
    return ones / (divisor * float(expected.l_max))


# ----------------------------------------------------------------------------------------------- exact VJP

@dataclass(frozen=True)
class Gradients:
    """d (c L) / d l_it = c m_it w_i: exactly 0 at masked positions and wherever the denominator is 0."""

    token_losses: np.ndarray
    cotangent: float
    weights: np.ndarray  # w_i
    expected: Exact
    token_mask: np.ndarray

    def inputs(self) -> dict[str, np.ndarray]:
        return {LOSSES: self.token_losses}


def case_vjp(case: Case, cotangents: dict[str, np.ndarray], expected: Exact | None = None) -> Gradients:
    expected = expected if expected is not None else exact(case)
    cotangent = float(np.asarray(cotangents[LOSS]))
    weights = row_weights(expected)
    gradient = np.where(case.token_mask, (cotangent * weights)[:, None], 0.0).reshape(case.token_mask.shape)
    return Gradients(gradient, cotangent, weights, expected, case.token_mask)


# ----------------------------------------------------------------------------------------------- tolerance

@dataclass(frozen=True)
class Roundings:
    """Roundings in the input dtype the plain formulation of a mode makes outside its accumulations: per row (the
    row sum rounded to the dtype, and for per-sequence the count's cast and the division by it), after the batch
    sum (the sum rounded, the divisor's cast and the divisions, the cast of the loss) and in the backward (the
    cotangent's cast, each division's backward, the cast of the gradient)."""

    row: int
    final: int
    backward: int


# docs/tolerance.md, "The loss reductions": e.g. seq-mean-token-mean as `(where(m, l, 0).sum(-1) / n.clamp(1)).mean()`
# rounds the row sum, casts the count and divides (3 per row), rounds the batch sum, divides by B and casts the
# loss (4 after); its autograd casts the cotangent, divides by B, casts the count, divides by it and rounds
# (7). A fixed length divides twice (by L_max and by D) and casts both.
ROUNDINGS = {
    TOKEN_MEAN: Roundings(row=1, final=4, backward=4),
    SEQ_MEAN_TOKEN_MEAN: Roundings(row=3, final=4, backward=7),
    SEQ_MEAN_TOKEN_SUM_NORM: Roundings(row=1, final=6, backward=6),
    SEQ_MEAN_TOKEN_SUM: Roundings(row=1, final=4, backward=4),
    TOKEN_SUM: Roundings(row=1, final=2, backward=2),
}
STRICT_STEPS = 4  # the built-ins' divisions and casts after their sums, all in the accumulation dtype


def _row_scale(expected: Exact) -> np.ndarray:
    """The factor each row's sum enters the loss with, before the final division: 1 or 1/n_i."""
    if expected.mode == SEQ_MEAN_TOKEN_MEAN:
        return np.where(expected.counts > 0, 1.0 / np.maximum(expected.counts, 1), 0.0)
    return np.ones(expected.batch)


def _denominator(expected: Exact) -> float:
    """Q, the final divisor: N, D, D L_max, D or 1; 0 where the loss is 0 by the guard."""
    tokens, divisor = int(expected.counts.sum()), expected.rows_divisor()
    return {TOKEN_MEAN: float(tokens), TOKEN_SUM: 1.0, SEQ_MEAN_TOKEN_SUM: float(divisor),
            SEQ_MEAN_TOKEN_MEAN: float(divisor),
            SEQ_MEAN_TOKEN_SUM_NORM: divisor * float(expected.l_max or 0.0)}[expected.mode]


def strict_output_dtype(dtype: str) -> str:
    """The built-ins' loss: float32 for half inputs (computed there, rounded once), else the input dtype."""
    return accumulation_dtype(dtype)


def tolerance(expected: Exact, dtype: str, precision: Precision = CONTRACT, extra: int = 0,
              underflows: int = 1) -> dict[str, np.ndarray]:
    """|L' - L| bound for an implementation running on `dtype` inputs (docs/tolerance.md, "The loss reductions").

    Each row's sum of n_i terms (any order, at least float32) errs by gamma(n_i + 1, u_acc) M_i; the rows enter
    with factor r_i (1, or 1/n_i per sequence), their sum over the batch adds gamma(B, u_acc) of its magnitude,
    and the elementwise roundings in the input dtype (contract) scale what they round; the final division by Q
    divides all of it. `extra`: more roundings after the batch sum, and `underflows`: how many separate
    computations each add their own absolute underflow error (reference/accumulation.py's combination of
    chunks)."""
    denominator = _denominator(expected)
    if denominator == 0 or not expected.counts.any():
        # a zero denominator gives exactly 0, and so does every mode without a selected token (a sum of nothing,
        # divided by whatever: no rounding, no underflow)
        return {LOSS: np.array(0.0)}
    u_acc, u_in = unit_roundoff(accumulation_dtype(dtype)), unit_roundoff(dtype)
    scale, magnitudes, counts = _row_scale(expected), expected.magnitudes, expected.counts
    summation = gamma(counts + 1, u_acc) * magnitudes
    weighted = float(np.sum(scale * magnitudes))  # W: the magnitude the batch sum works at
    loss = float(abs(expected.loss))
    if precision.strict:
        out = strict_output_dtype(dtype)
        rows = float(np.sum(scale * (summation + gamma(1, u_acc) * magnitudes)))
        before = rows + gamma(expected.batch, u_acc) * (weighted + rows)
        tol = (before + gamma(STRICT_STEPS + extra, u_acc) * (weighted + before)) / denominator
        tol = SAFETY * (tol + unit_roundoff(out) * loss + underflows * smallest_subnormal(out))
    else:
        counts_of, eta = ROUNDINGS[expected.mode], smallest_subnormal(dtype)
        final = counts_of.final + extra
        rows = float(np.sum(scale * (summation + gamma(counts_of.row, u_in) * (magnitudes + summation))))
        before = rows + gamma(expected.batch, u_acc) * (weighted + rows)
        tol = ((before + gamma(final, u_in) * (weighted + before)) / denominator
               + underflows * (counts_of.row + final) * eta
               + 4 * REFERENCE_VECTOR_ERROR * (weighted / denominator + loss))
    return {LOSS: np.array(float(tol))}


def ulp_scales(expected: Exact) -> dict[str, float]:
    denominator = _denominator(expected)
    return {LOSS: float(np.sum(_row_scale(expected) * expected.magnitudes)) / denominator if denominator else 0.0}


def output_dtypes(dtype: str) -> tuple[str, ...]:
    """The input dtype, or float32 for half inputs: never narrower, and float64 stays float64."""
    return (dtype, "float32") if dtype in HALF_DTYPES else (dtype,)


def gradient_tolerance(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                       precision: Precision = CONTRACT, extra: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """d l_it = c m_it w_i with exact weights (counts are exact): only the backward's own roundings err, each a
    relative error of the term, and the gradient is rounded to the input dtype at the end. `extra`: more
    roundings of each term (reference/accumulation.py's combination)."""
    u_acc, u_in, eta = unit_roundoff(accumulation_dtype(dtype)), unit_roundoff(dtype), smallest_subnormal(dtype)
    magnitude = np.abs(gradients.cotangent * gradients.weights)
    if precision.strict:
        bound = SAFETY * (magnitude * (gamma(STRICT_STEPS + extra, u_acc) + (1 + extra) * u_in) + eta)
    else:
        steps = ROUNDINGS[gradients.expected.mode].backward + extra
        bound = magnitude * (gamma(steps, u_in) + REFERENCE_VECTOR_ERROR) + steps * eta
    mask = gradients.token_mask
    tol = np.where(mask, np.asarray(bound)[:, None], 0.0).reshape(mask.shape)
    scale = np.where(mask, magnitude[:, None], 0.0).reshape(mask.shape)
    return {LOSSES: (tol, scale)}


def forward_overflow(expected: Exact, dtype: str, output: str) -> str | None:
    return None  # the domain keeps every exact sum below the dtype's largest / 64: a non-finite loss is a bug


def backward_overflow(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                      precision: Precision) -> str | None:
    return None  # |w_i| <= 1 and the cotangents are O(1): no exact intermediate of the backward nears the range


# ----------------------------------------------------------------------------------------------- relations

PADDING_VALUE = -3.5
TOKEN_SIZES = (1, 3, 7, 16, 33, 300, 512, 1031, 4096)  # the strategies' token sizes: where padding lands


def _rebound(case: Case, **parameters: object) -> Case:
    return case.with_(contract=case.contract.bind(**parameters))


def _pad_derive(case: Case) -> tuple[Case, ...]:
    batch, tokens = case.shape
    extra = next((size for size in TOKEN_SIZES if size > tokens), 2 * tokens) - tokens
    return (case.with_(token_losses=np.hstack([case.token_losses, np.full((batch, extra), PADDING_VALUE)]),
                       token_mask=np.hstack([case.token_mask, np.zeros((batch, extra), bool)])),)


def _same(case, values, derived, results, tol) -> list[Comparison]:
    """Each derived call gives the first call's loss (each within its own tolerance)."""
    return [Comparison(LOSS, result[LOSS], values[LOSS], tol(case)[LOSS] + tol(second)[LOSS])
            for second, result in zip(derived, results)]


def _permute_derive(case: Case) -> tuple[Case, ...]:
    batch, tokens = case.shape
    order = np.random.default_rng(batch * 7919 + tokens).permutation(batch)
    return (case.with_(token_losses=case.token_losses[order], token_mask=case.token_mask[order],
                       layout="contiguous" if case.layout == "expanded" else case.layout),)


SCALES = (2.0, -4.0)  # powers of two and a sign: exact, and within the domain's headroom


def _scale_derive(case: Case) -> tuple[Case, ...]:
    """The selected losses scaled; the padding left as drawn (scaled, a large finite padding value would leave
    the dtype's range, and what padding holds is no part of the loss)."""
    return tuple(case.with_(token_losses=np.where(case.token_mask, case.token_losses * factor, case.token_losses))
                 for factor in SCALES)


def _scale_compare(case, values, derived, results, tol) -> list[Comparison]:
    first = tol(case)[LOSS]
    return [Comparison(f"by {factor:g}", result[LOSS], factor * values[LOSS], abs(factor) * first + tol(second)[LOSS])
            for factor, second, result in zip(SCALES, derived, results)]


def _empty_row_derive(case: Case) -> tuple[Case, ...]:
    tokens = case.shape[1]
    return (case.with_(token_losses=np.vstack([case.token_losses, np.full((1, tokens), PADDING_VALUE)]),
                       token_mask=np.vstack([case.token_mask, np.zeros((1, tokens), bool)]),
                       layout="contiguous" if case.layout == "expanded" else case.layout),)


def counts_empty_rows(bound: Mapping[str, Any]) -> bool:
    """Whether D counts every row, fully masked ones too: a mode that divides by D, with rows="all"."""
    return bound.get("mode") in ROW_MODES and bound.get("rows") == "all"


def _empty_row_factor(case: Case) -> float:
    """What a fully masked row appended to the batch does to L: nothing, or B/(B+1) where D counts every row."""
    batch = case.shape[0]
    if case.contract.empty_rows_count and batch:
        return batch / (batch + 1)
    return 1.0


def _empty_row_compare(case, values, derived, results, tol) -> list[Comparison]:
    factor = _empty_row_factor(case)
    return [Comparison(f"times {factor:.6g}", results[0][LOSS], factor * values[LOSS],
                       factor * tol(case)[LOSS] + tol(derived[0])[LOSS])]


def _duplicate_derive(case: Case) -> tuple[Case, ...]:
    return (case.with_(token_losses=np.vstack([case.token_losses] * 2), token_mask=np.vstack([case.token_mask] * 2)),)


def _duplicate_compare(case, values, derived, results, tol) -> list[Comparison]:
    factor = 2.0 if case.contract.bound["mode"] == TOKEN_SUM else 1.0  # every mean is the same; a sum doubles
    return [Comparison(f"times {factor:g}", results[0][LOSS], factor * values[LOSS],
                       factor * tol(case)[LOSS] + tol(derived[0])[LOSS])]


def _fixed_length_derive(case: Case) -> tuple[Case, ...]:
    """Fixed-length and seq-mean-token-sum differ by the constant L_max only: the other of the two."""
    bound = case.contract.bound
    if bound["mode"] == SEQ_MEAN_TOKEN_SUM_NORM:
        return (_rebound(case, mode=SEQ_MEAN_TOKEN_SUM, l_max=None),)
    if bound["mode"] == SEQ_MEAN_TOKEN_SUM:
        return (_rebound(case, mode=SEQ_MEAN_TOKEN_SUM_NORM, l_max=CAMPAIGN_L_MAX),)
    return ()


def _fixed_length_compare(case, values, derived, results, tol) -> list[Comparison]:
    if not derived:
        return []
    norm_first = case.contract.bound["mode"] == SEQ_MEAN_TOKEN_SUM_NORM
    l_max = case.contract.bound["l_max"] if norm_first else derived[0].contract.bound["l_max"]
    factor = l_max if norm_first else 1.0 / l_max  # seq-mean-token-sum = fixed-length x L_max
    return [Comparison(f"times {factor:.6g}", results[0][LOSS], factor * values[LOSS],
                       abs(factor) * tol(case)[LOSS] + tol(derived[0])[LOSS])]


def _equal_counts_derive(case: Case) -> tuple[Case, ...]:
    """Every non-empty row trimmed to the same count k (its first k selected tokens, k the smallest count), where
    per-sequence is per-token times B+/D; the case in its own mode and in the other of the two. Only masking more:
    the values stay in the domain."""
    bound, mask = case.contract.bound, case.token_mask
    counts = mask.sum(axis=1)
    if bound["mode"] not in (TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN) or not (counts > 0).any():
        return ()
    smallest = counts[counts > 0].min()
    equal = case.with_(token_mask=mask & (np.cumsum(mask, axis=1) <= smallest))
    other = SEQ_MEAN_TOKEN_MEAN if bound["mode"] == TOKEN_MEAN else TOKEN_MEAN
    return equal, _rebound(equal, mode=other)


def _equal_counts_compare(case, values, derived, results, tol) -> list[Comparison]:
    if not derived:
        return []
    per_sequence, per_token = (0, 1) if derived[0].contract.bound["mode"] == SEQ_MEAN_TOKEN_MEAN else (1, 0)
    rows, nonempty = derived[per_sequence].contract.bound["rows"], int((derived[0].token_mask.sum(axis=1) > 0).sum())
    factor = nonempty / (case.shape[0] if rows == "all" else nonempty)  # B+ / D
    return [Comparison(f"per-sequence = per-token times {factor:.6g}", results[per_sequence][LOSS],
                       factor * results[per_token][LOSS],
                       factor * tol(derived[per_token])[LOSS] + tol(derived[per_sequence])[LOSS])]


RELATIONS = (
    # masked columns appended change nothing in any mode: this is what catches L_max = the padded width
    Relation("pad with masked columns", _pad_derive, _same),
    Relation("permute rows", _permute_derive, _same),
    Relation("scale by a power of two", _scale_derive, _scale_compare),
    # a fully masked row appended: token-mean and rows="nonempty" unchanged, rows="all" scaled by B/(B+1)
    Relation("append an empty row", _empty_row_derive, _empty_row_compare),
    Relation("duplicate the batch", _duplicate_derive, _duplicate_compare),
    Relation("fixed-length times L_max", _fixed_length_derive, _fixed_length_compare, rebinds=True),
    Relation("equal counts", _equal_counts_derive, _equal_counts_compare, rebinds=True),
)


# ------------------------------------------------------------------------------------------- input domain

LOSS_KINDS = ("general", "small integers", "log-probs")  # both signs first: losses are -A_i times a ratio


def _bound(values: dict[str, np.ndarray], mask: np.ndarray, dtype: str, repeats: int) -> dict[str, np.ndarray]:
    """Every row's sum_t m_it |l_it| and the whole batch's below largest(dtype) / 64: the loss, every sum and
    every partial sum is representable in the input dtype itself (token-sum may return it there)."""
    losses = values[LOSSES]
    magnitudes = np.abs(np.where(mask, losses, 0)).sum(axis=1) if losses.shape[1] else np.zeros(len(losses))
    worst = max(float(np.max(magnitudes, initial=0.0)), float(np.sum(magnitudes)) * repeats) * 64 / largest(dtype)
    if worst <= 1:
        return values
    return {LOSSES: losses * 2.0 ** -np.ceil(np.log2(worst))}


DOMAIN = Domain(menus={LOSSES: ValueMenu("token loss values", LOSS_KINDS, draw_values, one_sign="log-probs")},
                bound=_bound)

COTANGENT_KINDS = ("one", "drawn", "zero")  # loss.backward() is the first; a scale of either sign; nothing


def cotangents(kind: str, rng: np.random.Generator, case: Case) -> dict[str, np.ndarray]:
    value = {"one": 1.0, "zero": 0.0}.get(kind)
    drawn = round_to(np.array(rng.normal()), case.dtype) if value is None else np.array(value)
    return {LOSS: np.asarray(drawn, dtype=np.float64)}


# ------------------------------------------------------------------------------------------- explanations

def _a_length_constant(value: int) -> bool:
    """A whole number a trainer writes as a maximum length: a power of two up to 2^20 or a multiple of 100 up to
    100,000. Only those are read off a wrong value: any value is some L_max's loss, and a large arbitrary one
    matches within a half-precision tolerance by chance."""
    return 1 <= value <= 1 << 20 and (value & (value - 1) == 0 or (value % 100 == 0 and value <= 100_000))


# What trainers add to a denominator instead of clamping it (NeMo-RL, OpenRLHF, ROLL, torchtune: 1e-8). In
# float32 and narrower it vanishes (N + 1e-8 rounds to N) and such a candidate equals the exact loss, so it is
# never read off there; in float64 it moves the loss by eps/N, far beyond float64's rounding.
EPSILONS = (1e-8, 1e-6)
CLAMP_INSTEAD = "(clamp it to 1 instead)"


# A candidate: what a wrong implementation of the declared mode often computes instead, as its row weights w_i
# (the loss is sum_i w_i S_i and its gradient c m_it w_i: every such mistake is linear in the losses), with what
# it says about the code.
Candidate = tuple[str, np.ndarray]


def _uniform(expected: Exact, weight: float) -> np.ndarray:
    return np.full(expected.batch, weight)


def _per_row(expected: Exact, counts: np.ndarray, scale: float) -> np.ndarray:
    """w_i = 1 / (scale n_i) for the rows with a selected token, 0 for the others (a row mean's weights)."""
    return np.where(expected.counts > 0, 1.0 / (scale * np.where(expected.counts > 0, counts, 1.0)), 0.0)


def epsilon_candidates(expected: Exact, tokens: int, divisor: int) -> list[Candidate]:
    """The declared mode with an epsilon added to its divisor (N, D or D L_max), and for the per-sequence mean to
    the rows' n_i (alone, and with D's)."""
    mode, found = expected.mode, []
    denominator, named = {  # the mode's loss as its numerator over this denominator, and how the text names it
        TOKEN_MEAN: (tokens, ("the exact sum / (N + {eps}): ", "the token count")),
        SEQ_MEAN_TOKEN_SUM: (divisor, ("the exact {mode} with D + {eps}: ", "the row count")),
        SEQ_MEAN_TOKEN_MEAN: (divisor, ("the exact {mode} with D + {eps}: ", "the row count")),
        SEQ_MEAN_TOKEN_SUM_NORM: (divisor * float(expected.l_max or 1.0),
                                  ("the exact {mode} with D L_max + {eps}: ", "the divisor")),
    }.get(mode, (0, ("", "")))
    counts = expected.counts.astype(np.float64)
    for eps in EPSILONS:
        if denominator:
            text = named[0].format(mode=mode, eps=f"{eps:g}") + f"an epsilon added to {named[1]} {CLAMP_INSTEAD}?"
            weights = (_per_row(expected, counts, 1.0) if mode == SEQ_MEAN_TOKEN_MEAN else _uniform(expected, 1.0))
            found.append((text, weights / (denominator + eps)))
        if mode == SEQ_MEAN_TOKEN_MEAN and divisor:
            found.append((f"the exact {mode} with each row's n_i + {eps:g}: an epsilon added to the rows' counts "
                          f"{CLAMP_INSTEAD}?", _per_row(expected, counts + eps, divisor)))
            found.append((f"the exact {mode} with n_i + {eps:g} and D + {eps:g}: an epsilon added to every count "
                          f"{CLAMP_INSTEAD}?", _per_row(expected, counts + eps, divisor + eps)))
    return found


def _off_by_one_candidates(expected: Exact, tokens: int, divisor: int) -> list[Candidate]:
    """The declared mode with its token counts off by one (a token more or less counted than selected: an end or
    prompt token, a shifted mask, a length minus one), N for the token mean and each row's n_i for the per-sequence
    mean. Before the other modes: in half precision a count off by one moves the loss by about as much as another
    mode may differ from the declared one, and the slip of the declared mode is the likelier."""
    found: list[Candidate] = []
    for step in (1, -1):
        sign = "+" if step > 0 else "-"
        if expected.mode == TOKEN_MEAN and tokens + step > 0:
            found.append((f"the exact sum / {tokens + step}, N {sign} 1: the token count off by one?",
                          _uniform(expected, 1.0 / (tokens + step))))
        counts = expected.counts + step
        if expected.mode == SEQ_MEAN_TOKEN_MEAN and divisor and np.all(counts[expected.counts > 0] > 0):
            found.append((f"the exact {expected.mode} with each row's n_i {sign} 1: the rows' token counts off by one?",
                          _per_row(expected, counts.astype(np.float64), divisor)))
    return found


# Where a count by ones kept in a half-precision dtype stops: n + 1 rounds back to n (to even) from there on.
RUNNING_COUNT_LIMITS = {"bfloat16": 256, "float16": 2048}


def half_count_candidates(expected: Exact, tokens: int, divisor: int) -> list[Candidate]:
    """The declared mode with its counts (N, or each row's n_i) rounded to a half-precision dtype, as a mask cast
    to the losses' half dtype, or to a model's compute dtype whatever the losses', and summed keeps them:
    bfloat16 counts by ones only to 256, float16 to 2048."""
    found = []
    for half in ("bfloat16", "float16"):  # bfloat16 first: it stops counting by ones sooner
        if expected.mode == TOKEN_MEAN and tokens:
            rounded = float(round_to(np.array(tokens), half))
            if rounded != tokens:
                found.append((f"the exact sum / {rounded:g}, N = {tokens} rounded to {half}: the token count kept in "
                              f"{half} (a mask cast to a half-precision dtype and summed)?",
                              _uniform(expected, 1.0 / rounded)))
        if expected.mode == SEQ_MEAN_TOKEN_MEAN and divisor:
            counts = round_to(expected.counts, half)
            if np.any(counts != expected.counts):
                found.append((f"the exact {expected.mode} with each row's n_i rounded to {half}: the counts kept in "
                              f"{half} (a mask cast to a half-precision dtype and summed)?",
                              _per_row(expected, counts, divisor)))
    return found


def running_count_candidates(expected: Exact, tokens: int, divisor: int) -> list[Candidate]:
    """The declared mode with its counts kept as a running count in a half-precision dtype, one token at a time:
    it sticks at 256 in bfloat16, 2048 in float16."""
    found = []
    for half, limit in RUNNING_COUNT_LIMITS.items():
        running = f"counted one token at a time in {half}, which sticks at {limit}: a running count kept in {half}?"
        if expected.mode == TOKEN_MEAN and tokens > limit:
            found.append((f"the exact sum / {limit}, N = {tokens} {running}", _uniform(expected, 1.0 / limit)))
        if expected.mode == SEQ_MEAN_TOKEN_MEAN and divisor and np.any(expected.counts > limit):
            found.append((f"the exact {expected.mode} with each row's n_i {running}",
                          _per_row(expected, np.minimum(expected.counts, limit).astype(np.float64), divisor)))
    return found


def _candidates(expected: Exact, observed: float | None, unit: float = 0.0) -> list[Candidate]:
    """What a wrong implementation of the declared mode often computes instead, each with what it says about the
    code; the declared mode's own slips first, then the other modes and conventions. `observed`, the weight a
    wrong result implies where every row has one (the loss over T, a selected token's gradient over c), names
    the one slip read off it: fixed length with another whole L_max than the declared one; `unit`, the unit
    roundoff of the dtype that value was rounded in."""
    mode, rows, l_max = expected.mode, expected.rows, expected.l_max
    tokens, padded, batch = int(expected.counts.sum()), expected.tokens, expected.batch
    divisor = expected.rows_divisor()
    found: list[Candidate] = []
    if mode == SEQ_MEAN_TOKEN_SUM_NORM and divisor:
        if padded:
            found.append((f"the exact {mode} with L_max = {padded}, the padded width: L_max taken from the shape?",
                          _uniform(expected, 1.0 / (divisor * padded))))
        found.append((f"the exact {mode} without the 1/D: sum / L_max alone?",
                      _uniform(expected, 1.0 / float(l_max or 1.0))))
        found.append((f"the exact {SEQ_MEAN_TOKEN_SUM} (rows={rows}), sum / D alone: L_max left out, or the wrong "
                      "mode declared?", _uniform(expected, 1.0 / divisor)))
    if mode != TOKEN_SUM:
        if batch and padded:
            found.append((f"the mean over all {batch}x{padded} positions: .mean() over the padding too?",
                          _uniform(expected, 1.0 / (batch * padded))))
        clamped = int(np.maximum(expected.counts, 1).sum())
        if clamped != tokens and clamped:
            found.append((f"the exact sum / {clamped}: a per-row clamp(min=1) summed into N (N = {tokens})?",
                          _uniform(expected, 1.0 / clamped)))
    if mode == SEQ_MEAN_TOKEN_MEAN and divisor:
        found.append(("the per-sequence mean divided by D twice?",
                      _per_row(expected, expected.counts.astype(np.float64), divisor * divisor)))
    found.extend(epsilon_candidates(expected, tokens, divisor))
    found.extend(half_count_candidates(expected, tokens, divisor))
    # the declared mode with the other rows convention first: a slip of the declared mode, likelier than another
    # mode where a small case makes the two coincide
    for candidate in sorted(MODES, key=lambda other: other != mode):
        for convention in (ROWS if candidate in ROW_MODES else ("all",)):
            if (candidate, convention) == (mode, rows if mode in ROW_MODES else "all"):
                continue
            if mode == SEQ_MEAN_TOKEN_SUM_NORM and divisor and (candidate, convention) == (SEQ_MEAN_TOKEN_SUM, rows):
                continue  # named above, as L_max left out
            weights = row_weights(replace(expected, mode=candidate, rows=convention, l_max=l_max or CAMPAIGN_L_MAX))
            if candidate == mode:  # the other rows convention
                counted = "every row" if convention == "all" else "only the rows with a selected token"
                found.append((f"the exact {mode} with D counting {counted}: rows={convention}, where rows={rows} "
                              "is declared?", weights))
            else:
                name = candidate + (f" (rows={convention})" if candidate in ROW_MODES else "")
                found.append((f"the exact {name}, where {mode} is declared?", weights))
        if candidate == mode == SEQ_MEAN_TOKEN_MEAN and divisor:
            found.append(("the rows' means summed without the 1/D: the mean over the rows left out?",
                          _per_row(expected, expected.counts.astype(np.float64), 1.0)))
        if candidate == mode:  # the declared mode's last slip, its counts, before other modes
            found.extend(_off_by_one_candidates(expected, tokens, divisor))
    found.extend(running_count_candidates(expected, tokens, divisor))  # rarer than another mode: after them
    if mode == SEQ_MEAN_TOKEN_SUM_NORM and divisor:  # read off the value, so the least likely: last
        ratio = 1.0 / (divisor * observed) if observed else math.inf
        implied = _length_near(ratio, unit)
        if implied is not None and implied not in (l_max, padded, 1):  # 1: L_max left out, named above
            found.append((f"the exact {mode} with L_max = {implied}, where L_max = {l_max:g} is declared: another "
                          "constant in the code?", _uniform(expected, 1.0 / (divisor * implied))))
    return found


def _input_dtype_sums(case: Case, expected: Exact) -> list[tuple[str, float, float]]:
    """The declared mode's loss from running sums kept in the case's half-precision dtype, one selected position at
    a time, where the contract asks for float32 at least: each row's (a loop over the tokens; NumPy's cumulative
    sum in that dtype rounds every step as such a loop does, and so does NumPy's sum of an ml_dtypes bfloat16
    array), and for the modes that weigh every row alike the whole batch's. Each with the magnitude that what
    follows the sums (a division, the rows' sum, a cast) rounds at. Not row weights as `_candidates`: the
    rounding is in the sums. (NumPy's sum of a float16 array adds in float32 and rounds once, within tolerance.)"""
    if case.dtype not in HALF_DTYPES or not case.token_mask.any():
        return []
    native = np.where(case.token_mask, case.token_losses, 0.0).astype(numpy_dtype(case.dtype))
    weights = row_weights(expected)
    ways = [(f"each row's sum accumulated in {case.dtype} one token at a time", native, weights)]
    if np.all(weights == weights[0]):
        ways.append((f"the batch's sum accumulated in {case.dtype} one position at a time", native.reshape(1, -1),
                     weights[:1]))
    found: list[tuple[str, float, float]] = []
    for how, terms, weighed in ways:
        with np.errstate(over="ignore"):  # a sum past the dtype's range is left out below
            sums = np.cumsum(terms, axis=1)[:, -1].astype(np.float64)
        if not np.isfinite(sums).all():  # beyond the dtype's range: an overflow, named as one elsewhere
            continue
        value = _weighted(weighed, sums)
        if all(value != other for _, other, _ in found):  # one row is the batch
            found.append((f"the exact {expected.mode} from {how}: a sum kept in {case.dtype}, the input dtype "
                          "(accumulate in float32 or wider)?", value, float(np.sum(np.abs(weighed * sums)))))
    return found


def _unmasked_sums(case: Case, expected: Exact) -> list[tuple[str, float, float]]:
    """The declared mode's loss with every row's sum taken over all its positions, the masked-out ones too (ROLL's
    token-mean summed `loss_mat` unmasked), where those are finite and not all 0: the mask left out of the
    numerator, its counts kept. With the magnitude its sums round at."""
    losses, mask = case.token_losses, case.token_mask
    if not losses.size or mask.all() or not np.isfinite(losses).all() or not losses[~mask].any():
        return []
    weights = row_weights(expected)
    sums = np.array([math.fsum(row) for row in losses])
    magnitude = float(np.sum(np.abs(weights) * np.abs(losses).sum(axis=1)))
    return [(f"the exact {expected.mode} with the masked-out values summed too: the mask left out of the sum?",
             _weighted(weights, sums), magnitude)]


def _weighted(weights: np.ndarray, sums: np.ndarray) -> float:
    """sum_i w_i s_i, rounded once."""
    return float(sum((Fraction(float(w)) * Fraction(float(s)) for w, s in zip(weights, sums) if w), Fraction(0)))


def _length_near(ratio: float, unit: float) -> int | None:
    """The length constant (`_a_length_constant`) a value read as 1/(D L_max) was computed with: the whole number
    nearest `ratio` where that is one, else the power of two or the multiple of 100 nearest it, where `ratio` is
    that constant as the value's own rounding leaves it (`unit`, the unit roundoff of the dtype it was rounded in;
    a gradient c / (D L_max) rounds at most 4 times: the product D L_max, its reciprocal, the product by c, the
    cast). In bfloat16 c / (D 1024) reads as 1020 to 1028 and names 1024; a value off by another factor, read as
    a number no trainer writes as a length, names none."""
    if not math.isfinite(ratio) or ratio < 0.5:
        return None
    if _a_length_constant(round(ratio)):
        return round(ratio)
    near = [length for length in (2 ** round(math.log2(ratio)), 100 * round(ratio / 100))
            if _a_length_constant(length) and abs(length - ratio) <= 4 * unit * ratio]
    return min(near, key=lambda length: (abs(length - ratio), length), default=None)


def candidate_value(expected: Exact, weights: np.ndarray) -> float:
    """A candidate's loss, sum_i w_i S_i from its float64 weights, rounded once: one weight times the exact total
    T where every row has the same (a sum that cancels to 0 gives exactly 0), else from the exact products of the
    weights and the rows' sums."""
    if len(weights) == 0:
        return 0.0
    if np.all(weights == weights[0]):
        return float(Fraction(float(weights[0])) * Fraction(expected.total))
    return _weighted(weights, expected.row_sums)


def explain(case: Case, values: dict[str, np.ndarray], before: Sequence[tuple[str, float]] = ()) -> str | None:
    """A wrong loss named in the contract's terms where it equals one of the usual mistakes' exact values (all
    that it equals, the likeliest first: a small case can make several coincide). "Equals" is within what the
    contract precision allows an implementation of that mistake to round, whatever precision judged the loss: the
    hint names a formula, and under --precision strict that allowance spans many strict tolerances. A mistake is
    named only for a value the contract precision rejects too (one that only a strict tolerance rejects is a
    matter of rounding, not of formula), only where the mistake's exact value is itself out of tolerance, and never
    for a value nearer the declared mode's exact loss than the mistake's: where the allowance is wide (half
    precision, long rows), a value a strict tolerance rejects may still be nearly right. `before`: more mistakes,
    (what it says, its exact loss), weighed first (an engine's, of how the function was split)."""
    expected = exact_results(case)  # the declared mode's
    got = float(np.asarray(values[LOSS]))
    if not math.isfinite(got):
        return None
    scale = max(float(tolerance(expected, case.dtype)[LOSS]), 1e-300)
    exact_loss = float(expected.loss)
    if abs(got - exact_loss) <= scale:  # right under the contract precision: no mistake to name
        return None
    observed = got / expected.total if expected.total else None
    def named(value: float, allowance: float) -> bool:  # got is that mistake's value, and the exact loss is not
        return abs(got - value) <= allowance and abs(value - exact_loss) > scale and abs(got - value) < abs(
            got - exact_loss)

    loss_unit = unit_roundoff(accumulation_dtype(case.dtype))  # the loss is float32 for half inputs
    formulas = [*before, *((text, candidate_value(expected, weights))
                           for text, weights in _candidates(expected, observed, loss_unit))]
    matches = [(text, value) for text, value in formulas
               if named(value, 2 * scale + 8 * unit_roundoff(case.dtype) * abs(value))]
    # a rounding's slip after the formulas', held closer: its sums are exact as simulated, and only the few steps
    # after them round, in the loss's dtype (the input's, where the loss is one of its values, else float32)
    output = case.dtype if float(round_to(np.array(got), case.dtype)) == got else accumulation_dtype(case.dtype)
    for text, value, magnitude in _input_dtype_sums(case, expected):
        if named(value, 4 * unit_roundoff(output) * magnitude + smallest_subnormal(output)):
            matches.append((text, value))
    # the padding summed in: its sums round as the declared mode's formulas may, at the padding's magnitude
    for text, value, magnitude in _unmasked_sums(case, expected):
        if named(value, 2 * scale + 8 * unit_roundoff(case.dtype) * magnitude):
            matches.append((text, value))
    if not matches:
        return None
    return f"it equals {matches[0][1]:.6g}, " + ALTERNATIVES.join(text for text, _ in matches[:3])


def explain_split(case: Case, row_cuts: Sequence[int], token_cuts: Sequence[int],
                  values: dict[str, np.ndarray]) -> str | None:
    """A wrong loss of a per-rank function on a data x sequence mesh (rank (d, q) holding rows [row_cuts[d],
    row_cuts[d + 1]) and tokens [token_cuts[q], token_cuts[q + 1])) named as `explain` names one, with the
    mistakes of combining the ranks weighed first: each rank's own loss averaged or summed over the ranks, the
    ranks of one mesh axis combined so, a row's mean taken over each rank's slice of its tokens, L_max taken from
    that slice's width, B+ counted on each slice and summed, and the exact loss times or over a group's size."""
    bound, expected = case.contract.bound, exact_results(case)
    mode, rows, l_max = bound["mode"], bound["rows"], bound["l_max"]
    data, sequence = len(row_cuts) - 1, len(token_cuts) - 1
    row_blocks = [slice(start, stop) for start, stop in itertools.pairwise(row_cuts)]
    token_blocks = [slice(start, stop) for start, stop in itertools.pairwise(token_cuts)]

    def loss_of(rows_at: slice, tokens_at: slice) -> float:
        return float(reference(case.token_losses[rows_at, tokens_at], case.token_mask[rows_at, tokens_at], mode,
                               rows, l_max).loss)

    everything = slice(None)
    before: list[tuple[str, float]] = []
    if data * sequence > 1:
        own = [loss_of(r, t) for r in row_blocks for t in token_blocks]
        before += [(f"each rank's own {mode} of its block, averaged over the {data * sequence} ranks: a mean of "
                    "per-rank means (a local loss all-reduced with AVG, or SUM over the world size)?",
                    math.fsum(own) / len(own)),
                   (f"each rank's own {mode} of its block, summed over the {data * sequence} ranks (a local loss "
                    "all-reduced with SUM)?", math.fsum(own))]
    if data > 1 and sequence > 1:
        before += [("each data rank's own loss of its rows, averaged over the data ranks: its counts not "
                    "all-reduced over the data group?", math.fsum(loss_of(r, everything) for r in row_blocks) / data),
                   ("each sequence rank's own loss of its slice of the tokens, averaged over the sequence ranks: its "
                    "counts not all-reduced over the sequence group?",
                    math.fsum(loss_of(everything, t) for t in token_blocks) / sequence)]
    if sequence > 1 and mode == SEQ_MEAN_TOKEN_SUM_NORM:
        divisor = max(expected.rows_divisor(), 1)
        widths = [t.stop - t.start for t in token_blocks]
        totals = [math.fsum(case.token_losses[:, t][case.token_mask[:, t]]) for t in token_blocks]
        before.append((f"L_max taken from each rank's own slice of the tokens (widths {', '.join(map(str, widths))})?",
                       math.fsum(total / (divisor * width) for total, width in zip(totals, widths) if width)))
    if sequence > 1 and mode == SEQ_MEAN_TOKEN_MEAN:
        sliced = [reference(case.token_losses[:, t], case.token_mask[:, t], mode, rows, l_max) for t in token_blocks]
        slice_means = math.fsum(part.row_means for part in sliced) / max(expected.rows_divisor(), 1)
        before += [("each row's mean taken over the rank's own slice of its tokens (n_i counted on the slice), the "
                    "slices' means summed over the sequence ranks?", slice_means),
                   ("each row's mean taken over the rank's own slice of its tokens (n_i counted on the slice), the "
                    "slices' means averaged over the sequence ranks?", slice_means / sequence)]
    exact_loss = float(expected.loss)
    if sequence > 1 and rows == "nonempty" and mode in ROW_MODES:
        # B+ counted by each rank on its own slice of the tokens, then summed: a row with selected tokens on several
        # sequence ranks is counted once by each
        counted = sum(int(case.token_mask[:, t].any(axis=1).sum()) for t in token_blocks)
        nonempty = expected.nonempty
        if counted != nonempty and nonempty:
            before.append((f"D = B+ counted on each rank's own slice of the tokens and summed over the ranks "
                           f"({counted}, where {nonempty} rows hold a selected token): a row is counted on every "
                           "sequence rank that holds one of its tokens?", exact_loss * nonempty / counted))
    # a whole factor of a group's size: what is left of a collective of the wrong kind where the split is even
    for size, group in dict((size, group) for size, group in ((data, "the data group's size"),
                                                               (sequence, "the sequence group's size"),
                                                               (data * sequence, "the number of ranks")) if size > 1
                            ).items():
        before += [(f"{size} times the exact loss ({size}: {group}): a count all-reduced with AVG where SUM is needed, "
                    "or a value summed over ranks that each held it whole?", exact_loss * size),
                   (f"1/{size} of the exact loss ({size}: {group}): a sum all-reduced with AVG where SUM is needed, or "
                    "divided by the world size once more?", exact_loss / size)]
    return explain(case, values, before)


def explain_gradient(case: Case, cotangents: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> str | None:
    """A wrong gradient of the losses named as `explain` names a wrong loss: where it is, within the contract's
    allowance, c m_it w_i for the row weights w_i of one of the usual mistakes (out of tolerance itself, and
    nearer the gradient than the declared mode's is), where the contract precision rejects the gradient too. A
    backward that weighs the tokens as another mode does (a custom kernel's, a hand-written one) is named so even
    where the loss is right."""
    gradient = got.get(LOSSES)
    cotangent = float(np.asarray(cotangents[LOSS]))
    mask = case.token_mask
    if gradient is None or not cotangent or not mask.any() or not np.isfinite(gradient).all() or (
            gradient[~mask] != 0).any():
        return None
    exact_gradients = case_vjp(case, cotangents, exact_results(case))
    expected, want = exact_gradients.expected, exact_gradients.token_losses
    bound = gradient_tolerance(exact_gradients, cotangents, case.dtype)[LOSSES][0]  # the contract precision
    if (np.abs(gradient - want) <= bound).all():  # right under the contract precision: no mistake to name
        return None
    overflowed = _denominator_overflow(case, expected, gradient, want)
    if overflowed:
        return overflowed
    observed = float(np.median(gradient[mask])) / cotangent
    matches = []
    for text, weights in _candidates(expected, observed, unit_roundoff(case.dtype)):  # the gradient's dtype
        candidate = np.where(mask, (cotangent * weights)[:, None], 0.0)
        allowance = 2 * bound + 8 * unit_roundoff(case.dtype) * np.abs(candidate)
        if ((np.abs(gradient - candidate) <= allowance).all() and (np.abs(candidate - want) > bound).any()
                and np.abs(gradient - candidate).sum() < np.abs(gradient - want).sum()):
            matches.append(text)
    if not matches:
        return None
    return "it is the gradient of " + f"{ALTERNATIVES}of ".join(matches[:3])


# The denominator of each mode's row weights w_i, in the contract's letters: what a backward divides by.
DENOMINATORS = {TOKEN_MEAN: "N", SEQ_MEAN_TOKEN_MEAN: "D n_i", SEQ_MEAN_TOKEN_SUM_NORM: "D L_max",
                SEQ_MEAN_TOKEN_SUM: "D"}


def _denominator_overflow(case: Case, expected: Exact, gradient: np.ndarray, want: np.ndarray) -> str | None:
    """A gradient that is 0 at every selected token where the exact one is not, and the mode's denominator (1 / w_i)
    past the gradient dtype's largest value: a denominator formed in that dtype is inf, and c / inf is 0."""
    selected = case.token_mask & (want != 0)
    name = DENOMINATORS.get(expected.mode)
    if name is None or not selected.any() or (gradient[selected] != 0).any():
        return None
    weights = np.abs(row_weights(expected))
    denominator = float(1 / weights[weights > 0].min())
    if denominator <= largest(case.dtype):
        return None
    return (f"every selected token's gradient is 0, where {name} = {denominator:.6g} is past {case.dtype}'s largest "
            f"value, {largest(case.dtype):.6g}: is the denominator formed in {case.dtype} (inf there, and c / inf = "
            "0)? Form counts and denominators in float32 or as integers")


# -------------------------------------------------------------------------------------------------- record

def _parameter_rules(bound: dict[str, object]) -> dict[str, object]:
    """rows only matters where L divides by D, L_max only for fixed length: the others are normalized away (so
    the same reduction has one label), and fixed length needs its L_max."""
    mode = bound["mode"]
    if mode not in ROW_MODES:
        bound["rows"] = "all"
    if mode != SEQ_MEAN_TOKEN_SUM_NORM:
        bound["l_max"] = None
    elif bound["l_max"] is None:
        raise ValueError("the seq-mean-token-sum-norm (fixed-length) mode needs l_max, its positive constant L_max")
    else:
        bound["l_max"] = float(bound["l_max"])
        if not 0 < bound["l_max"] < math.inf:
            raise ValueError(f"l_max must be a positive number, got {bound['l_max']!r}")
    return bound


def _label(bound: dict[str, object]) -> str:
    mode = str(bound["mode"])
    if mode == SEQ_MEAN_TOKEN_SUM_NORM:
        return f"{mode}, rows={bound['rows']}, L_max={bound['l_max']:g}"
    return f"{mode}, rows={bound['rows']}" if mode in ROW_MODES else mode


def _length_or_none(value: object) -> object:
    """L_max is a length in tokens: at least 1 (so |w_i| <= 1 and the loss never exceeds its inputs' range,
    which the tolerance model assumes), finite."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"l_max must be a number (a length in tokens), got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"l_max must be a length of at least 1 (tokens), got {value!r}")
    return value


BOOK = {LOSSES: [[1, 1, 1, 1, 10, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 10]],
        MASK: [[1, 1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]}
EXAMPLES = (  # the RLHF book's example, section 6.3.2: sequence means 2.8 and 1.9
    Example("the book's example, per-sequence", BOOK, {LOSS: 2.35}, {"mode": SEQ_MEAN_TOKEN_MEAN}),
    Example("the book's example, per-token", BOOK, {LOSS: 33 / 15}, {"mode": TOKEN_MEAN}),
    Example("the book's example, fixed-length", BOOK, {LOSS: 1.65}, {"mode": SEQ_MEAN_TOKEN_SUM_NORM, "l_max": 10}),
    Example("the book's example, seq-mean-token-sum", BOOK, {LOSS: 16.5}, {"mode": SEQ_MEAN_TOKEN_SUM}),
    Example("the book's example, token-sum", BOOK, {LOSS: 33}, {"mode": TOKEN_SUM}),
    Example("all masked", {LOSSES: [[1, 2], [3, 4]], MASK: [[0, 0], [0, 0]]}, {LOSS: 0}, {"mode": TOKEN_MEAN}),
    # tunix's spelling, rows left undeclared: its D counts the one row with a selected token (2, not 2 / 2)
    Example("tunix's sequence-mean-token-mean", {LOSSES: [[1, 3], [5, 7]], MASK: [[1, 1], [0, 0]]}, {LOSS: 2},
            {"mode": "sequence-mean-token-mean"}),
    # padding that a product with the mask turns into NaN (0 * inf), in one row beside a clean one
    Example("-inf and NaN padding", {LOSSES: [[1, 2, -math.inf], [4, math.nan, math.inf], [1, 3, 2]],
                                     MASK: [[1, 1, 0], [1, 0, 0], [1, 1, 1]]}, {LOSS: 2.5},
            {"mode": SEQ_MEAN_TOKEN_MEAN}),
)

PARAMETERS = (
    Parameter("mode", MODES, TOKEN_MEAN, "the reduction: " + ", ".join(MODES), MODE_ALIASES,
              implies=TRAINER_CONVENTIONS),
    Parameter("rows", ROWS, "all", "what D counts: every row (the book's 1/B) or only rows with a selected token "
              "(left undeclared: all, or the convention of the trainer whose name the mode is spelled with)"),
    Parameter("l_max", None, None, "L_max of seq-mean-token-sum-norm (fixed-length), a positive constant",
              check=_length_or_none),
)

# The campaign fuzzes the built-ins in every mode and convention, one drawn per example.
CAMPAIGN_PARAMETERS: tuple[dict[str, object], ...] = tuple(
    {"mode": mode, "rows": rows, "l_max": CAMPAIGN_L_MAX if mode == SEQ_MEAN_TOKEN_SUM_NORM else None}
    for mode in MODES for rows in (ROWS if mode in ROW_MODES else ("all",)))

CONTRACT = Contract(
    name="reduction",
    title="the loss reduction",
    signature="fn(token_losses, token_mask) -> loss",
    inputs=(
        Input(LOSSES, ("batch", "tokens"), "float", "tokens", differentiable=True, mesh=("data", "sequence")),
        Input(MASK, ("batch", "tokens"), "bool", "mask", mesh=("data", "sequence")),
    ),
    outputs=(Output(LOSS, (), replicated=("data", "sequence")),),
    returns_mapping=False,
    exact=exact,
    vjp=case_vjp,
    tolerance=tolerance,
    gradient_tolerance=gradient_tolerance,
    ulp_scales=ulp_scales,
    output_dtypes=output_dtypes,
    forward_overflow=forward_overflow,
    backward_overflow=backward_overflow,
    domain=DOMAIN,
    relations=RELATIONS,
    invariants=(),
    cotangent_kinds=COTANGENT_KINDS,
    cotangents=cotangents,
    trivial_cotangent_kinds=("zero",),
    examples=EXAMPLES,
    parameters=PARAMETERS,
    parameter_rules=_parameter_rules,
    parameter_menu=CAMPAIGN_PARAMETERS,
    parameter_label=_label,
    explain=explain,
    explain_gradient=explain_gradient,
    explain_split=explain_split,
    counts_empty_rows=counts_empty_rows,
)
