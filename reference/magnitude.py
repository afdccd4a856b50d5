"""The magnitude diagnostic: sequence-summed vs token-averaged policy-gradient weights, and their ratio.

For sequence i, token t: advantage A_i, log-prob l_it, mask m_it, n_i = sum_t m_it, S_i = sum_t m_it l_it:

    sequence_summed_i = A_i S_i
    token_averaged_i  = sequence_summed_i / n_i, and 0 when n_i = 0
    magnitude_ratio   = N / D, N = sum_i |sequence_summed_i|, D = sum_i |token_averaged_i|; 0 when D = 0

`fn(token_log_probs, advantages, token_mask) -> {"sequence_summed", "token_averaged", "magnitude_ratio"}`,
all in the log-probs' dtype. This module is the whole contract: exact forward (`math.fsum` per row) and VJP,
the tolerance (derived in docs/tolerance.md), the relations, the input domain, the cotangents, the examples.

Exactness: inputs of any dtype are taken at their exact values (every float16, bfloat16 and float32 value is
a float64); `math.fsum` returns the correctly rounded float64 of each row's exact sum, so the results carry
at most one float64 rounding per operation after it (2**-52 relative for the vectors, 2**-50 for the ratio),
far below any implementation's tolerance. A plain float64 sum would carry the very error it is meant to
judge in float64 implementations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reference.case import Case
from reference.contract import Comparison, Contract, Domain, Example, Input, Invariant, Output, Relation, ValueMenu
from reference.dtypes import (
    DTYPE_NAMES,
    accumulation_dtype,
    dtype_name,
    largest,
    round_to,
    smallest_subnormal,
    unit_roundoff,
)
from reference.tolerance import (
    CONTRACT,
    REFERENCE_RATIO_ERROR,
    REFERENCE_VECTOR_ERROR,
    SAFETY,
    Precision,
    gamma,
    overflows,
)
from reference.values import TOKEN_VALUE_KINDS, draw_values

SUMMED, AVERAGED, RATIO = "sequence_summed", "token_averaged", "magnitude_ratio"
LOG_PROBS, ADVANTAGES, MASK = "token_log_probs", "advantages", "token_mask"
OUTPUT_KEYS: tuple[str, ...] = (SUMMED, AVERAGED, RATIO)
VECTORS = (SUMMED, AVERAGED)


# --------------------------------------------------------------------------------------------- exact forward

@dataclass(frozen=True)
class Exact:
    """Exact results in float64, and the magnitudes the tolerance model needs."""

    sequence_summed: np.ndarray  # (batch,)
    token_averaged: np.ndarray  # (batch,)
    magnitude_ratio: np.ndarray  # ()
    advantages: np.ndarray  # (batch,) A_i: the error model scales underflow and gradients with it
    selected_counts: np.ndarray  # (batch,) int64, n_i
    selected_sums: np.ndarray  # (batch,) S_i = sum_t m_it l_it, correctly rounded
    absolute_row_sums: np.ndarray  # (batch,) sum_t m_it |A_i l_it|: the scale of the summation error
    numerator: float  # N = sum_i |sequence_summed_i|
    denominator: float  # D = sum_i |token_averaged_i|

    def outputs(self) -> dict[str, np.ndarray]:
        return {key: getattr(self, key) for key in OUTPUT_KEYS}


def _exact_float64(name: str, array: object, ndim: int) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(array).__name__}")
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {array.shape}")
    if dtype_name(array.dtype) not in DTYPE_NAMES:
        raise TypeError(f"{name} must have one of the dtypes {', '.join(DTYPE_NAMES)}, got {array.dtype}")
    return array.astype(np.float64)


def reference(token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray) -> Exact:
    """Exact float64 results for NumPy inputs of any supported dtype (masked positions may hold inf/NaN)."""
    log_probs = _exact_float64(LOG_PROBS, token_log_probs, 2)
    adv = _exact_float64(ADVANTAGES, advantages, 1)
    batch, tokens = log_probs.shape
    if adv.shape != (batch,):
        raise ValueError(f"advantages must have shape ({batch},), got {adv.shape}")
    if not isinstance(token_mask, np.ndarray) or token_mask.dtype != np.bool_:
        got = getattr(token_mask, "dtype", type(token_mask).__name__)
        raise TypeError(f"token_mask must be a bool numpy.ndarray of shape {(batch, tokens)}, got {got}")
    if token_mask.shape != (batch, tokens):
        raise ValueError(f"token_mask must have shape {(batch, tokens)}, got {token_mask.shape}")
    if not np.isfinite(adv).all():
        raise ValueError("advantages must be finite")
    if not np.isfinite(log_probs[token_mask]).all():
        raise ValueError("token_log_probs must be finite wherever token_mask is true")

    counts = token_mask.sum(axis=1, dtype=np.int64)
    sums = np.array([math.fsum(row[keep]) for row, keep in zip(log_probs, token_mask)], dtype=np.float64)
    sums = sums.reshape(batch)
    summed = adv * sums
    averaged = np.where(counts > 0, summed / np.maximum(counts, 1), 0.0)
    summed = np.where(counts > 0, summed, 0.0)  # exactly +0.0, not -0.0, for empty rows
    abs_row_sums = np.abs(adv) * np.abs(np.where(token_mask, log_probs, 0.0)).sum(axis=1)
    numerator = math.fsum(np.abs(summed))
    denominator = math.fsum(np.abs(averaged))
    ratio = numerator / denominator if denominator > 0 else 0.0
    return Exact(summed, averaged, np.array(ratio, dtype=np.float64), adv, counts, sums, abs_row_sums,
                 numerator, denominator)


def exact(case: Case) -> Exact:
    return reference(case.token_log_probs, case.advantages, case.token_mask)


# ----------------------------------------------------------------------------------------------- exact VJP

@dataclass(frozen=True)
class Gradients:
    """The exact VJP. With S_i, s_i = A_i S_i, a_i = s_i / n_i, N, D, R = N / D as above and cotangents
    (c_s, c_a, c_R), the chain rule gives, for a row with n_i > 0 (d|x|/dx = sign(x), sign(0) = 0):

        g_i = c_s_i + c_a_i / n_i + c_R (sign(s_i) / D - N sign(s_i) / (D**2 n_i))   [c_R terms only if D > 0]

    then d/dl_it = m_it A_i g_i and d/dA_i = S_i g_i. A row with n_i = 0 has s_i = a_i = 0 whatever its inputs:
    every gradient of it is 0, and masked positions get exactly 0. When D = 0, R is identically 0 in a
    neighbourhood (the where-guard), so the ratio contributes no gradient."""

    token_log_probs: np.ndarray  # (batch, tokens) float64
    advantages: np.ndarray  # (batch,) float64
    row_gradients: np.ndarray  # g_i = d(loss)/d s_i: what the tolerance model scales
    expected: Exact
    input_advantages: np.ndarray  # A_i
    token_mask: np.ndarray
    absolute_selected_sums: np.ndarray  # sum_t m_it |l_it|

    def inputs(self) -> dict[str, np.ndarray]:
        return {LOG_PROBS: self.token_log_probs, ADVANTAGES: self.advantages}


def complete_cotangents(cotangents: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """A cotangent for each of the three outputs, as float64 arrays of their shapes; a missing one is 0."""
    shapes = dict(zip(OUTPUT_KEYS, [(batch,), (batch,), ()]))
    return {key: np.asarray(cotangents[key], dtype=np.float64) if key in cotangents else np.zeros(shape)
            for key, shape in shapes.items()}


def vjp(token_log_probs: np.ndarray, advantages: np.ndarray, token_mask: np.ndarray,
        cotangents: dict[str, np.ndarray], expected: Exact | None = None) -> Gradients:
    """Exact gradients of sum(c_s * s) + sum(c_a * a) + c_R * R; missing cotangents count as 0. `expected`,
    where the caller has it, is reference() of the same inputs."""
    if expected is None:
        expected = reference(token_log_probs, advantages, token_mask)
    complete = complete_cotangents(cotangents, expected.selected_counts.shape[0])
    c_summed, c_averaged = complete[SUMMED], complete[AVERAGED]
    c_ratio = float(complete[RATIO])
    counts = expected.selected_counts
    active = counts > 0
    safe_counts = np.maximum(counts, 1)
    sign = np.sign(expected.sequence_summed)
    row = c_summed + c_averaged / safe_counts
    if expected.denominator > 0:
        d = expected.denominator
        row = row + c_ratio * (sign / d - expected.numerator * sign / (d * d * safe_counts))
    row = np.where(active, row, 0.0)
    adv = np.asarray(advantages, dtype=np.float64)
    grad_log_probs = np.where(token_mask, (adv * row)[:, None], 0.0)
    grad_advantages = expected.selected_sums * row
    absolute_sums = np.abs(np.where(token_mask, np.asarray(token_log_probs, dtype=np.float64), 0.0)).sum(axis=1)
    return Gradients(grad_log_probs.reshape(token_mask.shape), grad_advantages, row, expected, adv,
                     np.asarray(token_mask, dtype=bool), absolute_sums)


def case_vjp(case: Case, cotangents: dict[str, np.ndarray], expected: Exact | None = None) -> Gradients:
    return vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents, expected)


# ----------------------------------------------------------------------------------------------- tolerance

@dataclass(frozen=True)
class Roundings:
    """How many roundings in the output dtype an implementation may make outside its accumulations.

    `summed`, `averaged`: elementwise roundings on the way to each s_i and a_i (per token before the sum, or
    per row after it); `ratio`: the ratio's own roundings after its batch sums (N and D rounded, the division,
    casts); `backward`: the roundings any one term of the row gradient g_i goes through, the final products
    with A_i or S_i and the casts included. Strict keeps the original one-rounding model."""

    summed: int = 1
    averaged: int = 1
    ratio: int = 1
    backward: int = 1


# The counts of the plain formulations (docs/tolerance.md): s_i = A_i * sum(where(mask, lp, 0)) rounds the
# sum and the product (2); a_i = s_i / float(n_i) adds the count's cast and the division (4); the ratio
# rounds N and D and divides (3), or divides each batch sum by the batch size first, as a hand-written
# mean does (5); torch's autograd of that graph in the input dtype puts the ratio's D-term through
# 3 (division backward) + 1 (+ c_a) + 2 (/ n, the count's cast) + 1 (a mean's / batch) + 2 (sums into g_i)
# + 1 (* A_i) = 10 roundings.
ROUNDINGS = {"contract": Roundings(summed=2, averaged=4, ratio=5, backward=10), "strict": Roundings()}


@dataclass(frozen=True)
class _ForwardBounds:
    """Worst-case forward errors: what the forward and the gradient tolerances share."""

    u_acc: float
    u_out: float
    eta: float
    summed: np.ndarray  # bound on |s'_i - s_i|
    averaged: np.ndarray  # bound on |a'_i - a_i|
    numerator: float  # dN, bound on |N' - N| for the computed N = sum |s'_i| (before its own rounding)
    denominator: float  # dD, likewise for D


def _forward_bounds(expected: Exact, dtype: str, precision: Precision) -> _ForwardBounds:
    counts_of = ROUNDINGS[precision.name]
    u_acc, u_out = unit_roundoff(accumulation_dtype(dtype)), unit_roundoff(dtype)
    eta = smallest_subnormal(dtype)
    counts = expected.selected_counts
    active = counts > 0
    safe_counts = np.maximum(counts, 1)
    magnitude = expected.absolute_row_sums  # M_i
    summation = gamma(counts + 2, u_acc) * magnitude
    if precision.strict:
        summed = summation + u_out * np.abs(expected.sequence_summed) + eta
        averaged = summation / safe_counts + u_out * np.abs(expected.token_averaged) + eta
    else:
        # Each rounding in the output dtype scales a value no larger than M_i + summation (a partial
        # product per token, the row sum, its product with A_i), and one that underflows adds at most eta,
        # which a later product with A_i can scale.
        underflow = eta * np.maximum(1.0, np.abs(expected.advantages))
        summed = (summation + gamma(counts_of.summed, u_out) * (magnitude + summation)
                  + counts_of.summed * underflow + REFERENCE_VECTOR_ERROR * np.abs(expected.sequence_summed))
        averaged = ((summation + gamma(counts_of.averaged, u_out) * (magnitude + summation)) / safe_counts
                    + counts_of.averaged * underflow + REFERENCE_VECTOR_ERROR * np.abs(expected.token_averaged))
    summed, averaged = np.where(active, summed, 0.0), np.where(active, averaged, 0.0)
    # The batch sums of |s'_i| and |a'_i|: in any order, in at least float32, over values off by the bounds.
    batch_gamma = gamma(len(counts), u_acc)
    slack = 0.0 if precision.strict else 1.0  # strict: the first-order form it always had
    return _ForwardBounds(
        u_acc, u_out, eta, summed, averaged,
        numerator=float(summed.sum() + batch_gamma * (expected.numerator + slack * summed.sum())),
        denominator=float(averaged.sum() + batch_gamma * (expected.denominator + slack * averaged.sum())),
    )


def tolerance(expected: Exact, dtype: str, precision: Precision = CONTRACT) -> dict[str, np.ndarray]:
    """Per-element absolute tolerances for an implementation running in `dtype` (docs/tolerance.md)."""
    bounds = _forward_bounds(expected, dtype, precision)
    denominator, ratio = expected.denominator, float(expected.magnitude_ratio)
    if denominator == 0:
        tol_ratio = 0.0
    elif bounds.denominator >= denominator:
        tol_ratio = np.inf  # the computed D may be 0: no bound exists, only finiteness is checked
    else:
        # |N'/D' - N/D| <= (N + dN)/(D - dD) - N/D, exactly, for N' and D' within their bounds.
        propagated = (bounds.numerator + ratio * bounds.denominator) / (denominator - bounds.denominator)
        if precision.strict:
            tol_ratio = SAFETY * (propagated + (bounds.u_acc + bounds.u_out) * ratio + bounds.eta)
        else:
            own = gamma(ROUNDINGS[precision.name].ratio, bounds.u_out)  # N and D rounded, the division, casts
            tol_ratio = (propagated + own * (ratio + propagated) + ROUNDINGS[precision.name].ratio * bounds.eta
                         + REFERENCE_RATIO_ERROR * ratio)
    factor = SAFETY if precision.strict else 1.0
    return {SUMMED: factor * bounds.summed, AVERAGED: factor * bounds.averaged, RATIO: np.array(float(tol_ratio))}


def ulp_scales(expected: Exact) -> dict[str, np.ndarray | float]:
    """The magnitude each output is computed at: ulps are taken there where the exact value is smaller."""
    counts = np.maximum(expected.selected_counts, 1)
    return {SUMMED: expected.absolute_row_sums, AVERAGED: expected.absolute_row_sums / counts, RATIO: 0.0}


def output_dtypes(dtype: str) -> tuple[str, ...]:
    return (dtype,)


def forward_overflow(expected: Exact, dtype: str, output: str) -> str | None:
    """Where a non-finite output comes from an exact intermediate beyond the dtype's range: a row sum S_i kept
    in a half dtype (the product with A_i keeps s_i in range, but S_i itself need not be)."""
    sums = np.abs(expected.selected_sums)
    if not overflows(float(np.max(sums, initial=0.0)), dtype):
        return None
    row = int(np.argmax(sums))
    return (f"the row sum of row {row} overflowed {dtype} (exact {float(expected.selected_sums[row]):.3g}, "
            f"beyond {largest(dtype):.6g}): keep the sum over tokens in float32 until it is multiplied by A_i")


@dataclass(frozen=True)
class _RowGradientTerms:
    """The magnitudes the row gradient g_i is made of, and the exact intermediates that can overflow."""

    terms: np.ndarray  # T_i = |c_s_i| + |c_a_i| / n_i + |c_R| / D + |c_R| N / (D^2 n_i)
    through_n: float  # |c_R| / D
    through_d: np.ndarray  # |c_R| N / (D^2 n_i)
    kink: np.ndarray  # bool: s_i is 0 or within its tolerance of 0, where any subgradient of |x| is right
    propagated: np.ndarray  # the error D' and N' carry into g_i
    peak: float  # the largest exact intermediate of the backward (for telling overflow from a bug)


def _row_terms(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
               precision: Precision) -> tuple[_RowGradientTerms, _ForwardBounds]:
    expected = gradients.expected
    bounds = _forward_bounds(expected, dtype, precision)
    counts = expected.selected_counts
    safe_counts = np.maximum(counts, 1)
    batch = len(counts)
    complete = complete_cotangents(cotangents, batch)
    c_ratio = abs(float(complete[RATIO]))
    terms = np.abs(complete[SUMMED]) + np.abs(complete[AVERAGED]) / safe_counts
    through_n, through_d = 0.0, np.zeros(batch)
    propagated = np.zeros(batch)
    kink = np.zeros(batch, bool)
    peak = 0.0
    n_, d_ = expected.numerator, expected.denominator
    if d_ > 0:
        # The backward forms the ratio's derivative through D whatever its cotangent, 0 included (0 * inf is NaN):
        # N / D^2 in torch's (N / D) / D, 1 / D^2 in JAX's y ** -2
        peak = max(n_ / (d_ * d_), 1 / (d_ * d_))
    if d_ > 0 and c_ratio > 0:
        through_n = c_ratio / d_
        through_d = c_ratio * n_ / (d_ * d_ * safe_counts)
        terms = terms + through_n + through_d
        tol = tolerance(expected, dtype, precision)
        kink = ((np.abs(expected.sequence_summed) <= tol[SUMMED])
                | (np.abs(expected.token_averaged) <= tol[AVERAGED])) & (counts > 0)
        d_numerator, d_denominator = bounds.numerator, bounds.denominator
        if d_denominator >= d_:
            propagated[:] = np.inf
        elif precision.strict:  # the first-order form
            rho_d, rho_n = d_denominator / (d_ - d_denominator), d_numerator / n_
            propagated = through_n * rho_d + through_d * (rho_n + 2 * rho_d)
        else:  # exact worst cases: |1/D' - 1/D| <= dD / (D (D - dD)); N'/D'^2 <= (N + dN) / (D - dD)^2
            rho_d, rho_n = d_denominator / (d_ - d_denominator), d_numerator / n_
            propagated = through_n * rho_d + through_d * ((1 + rho_n) * (1 + rho_d) ** 2 - 1)
        peak = max(peak, through_n, c_ratio * n_ / (d_ * d_), float(np.max(through_d, initial=0.0)))
    scale = np.abs(gradients.input_advantages) + np.abs(expected.selected_sums)
    peak = max(peak, float(np.max(terms * np.maximum(scale, 1.0), initial=0.0)))
    return _RowGradientTerms(terms, through_n, through_d, kink, propagated, peak), bounds


def gradient_tolerance(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                       precision: Precision = CONTRACT) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(tolerance, ulp scale) of each input's gradient (derivation in docs/tolerance.md, "Gradients").

    The row gradient g_i = c_s_i + c_a_i / n_i + c_R (sign(s_i) / D - N sign(s_i) / (D^2 n_i)) is computed
    from D' and N' that carry the forward errors, and (contract) each of its terms may go through the
    backward's roundings in the input dtype: the error is bounded by the terms' magnitudes T_i, not by |g_i|,
    since the terms can cancel. Then d/dl_it = A_i g_i and d/dA_i = S_i g_i. Where s_i is 0 or within its
    forward tolerance of 0, any subgradient of |x| in [-1, 1] is right: that row's tolerance is widened by
    the whole range the ratio's terms can take."""
    row, bounds = _row_terms(gradients, cotangents, dtype, precision)
    with np.errstate(invalid="ignore"):  # 0 * inf where no bound exists: NaN, made inf below
        tol_lp, tol_adv = _gradient_bounds(gradients, row, bounds, precision)
    tol_lp, tol_adv = np.nan_to_num(tol_lp, nan=np.inf), np.nan_to_num(tol_adv, nan=np.inf)
    expected = gradients.expected
    active = expected.selected_counts > 0
    abs_adv = np.abs(gradients.input_advantages)
    mask = gradients.token_mask
    return {
        LOG_PROBS: (np.where(mask & active[:, None], tol_lp, 0.0), np.where(mask, (abs_adv * row.terms)[:, None], 0.0)),
        ADVANTAGES: (np.where(active, tol_adv, 0.0), np.abs(expected.selected_sums) * row.terms),
    }


def _gradient_bounds(gradients: Gradients, row: _RowGradientTerms, bounds: _ForwardBounds,
                     precision: Precision) -> tuple[np.ndarray, np.ndarray]:
    """Unmasked tolerances of d token_log_probs and d advantages (see gradient_tolerance)."""
    expected = gradients.expected
    u_acc, u_out, eta = bounds.u_acc, bounds.u_out, bounds.eta
    counts = expected.selected_counts
    sign = np.abs(np.sign(expected.sequence_summed))
    kink_range = np.where(row.kink, (1 + sign) * (row.through_n + row.through_d), 0.0)
    exact_row = np.abs(gradients.row_gradients)
    abs_adv = np.abs(gradients.input_advantages)
    summation = gamma(counts + 1, u_acc) * gradients.absolute_selected_sums
    if precision.strict:
        row_error = gamma(6, u_acc) * row.terms + row.propagated
        tol_lp = (abs_adv * (row_error + u_acc * exact_row))[:, None] + u_out * np.abs(gradients.token_log_probs) + eta
        tol_adv = (np.abs(expected.selected_sums) * row_error + summation * (exact_row + row_error)
                   + u_out * np.abs(gradients.advantages) + eta)
        tol_lp, tol_adv = SAFETY * tol_lp, SAFETY * tol_adv
    else:
        backward = ROUNDINGS[precision.name].backward
        rounding = gamma(backward, u_out)
        row_error = rounding * (row.terms + row.propagated) + row.propagated + REFERENCE_VECTOR_ERROR * row.terms
        underflow = backward * eta
        tol_lp = np.broadcast_to((abs_adv * row_error + underflow * np.maximum(abs_adv, 1.0))[:, None],
                                 gradients.token_log_probs.shape)
        # S_i as the implementation has it: summed in at least float32, perhaps rounded once to the dtype.
        sum_error = summation + u_out * gradients.absolute_selected_sums
        tol_adv = (np.abs(expected.selected_sums) * row_error + sum_error * (row.terms + row_error + kink_range)
                   + underflow * np.maximum(np.abs(expected.selected_sums), 1.0))
    tol_lp = tol_lp + (abs_adv * kink_range)[:, None]
    tol_adv = tol_adv + np.abs(expected.selected_sums) * kink_range
    return tol_lp, tol_adv


def backward_overflow(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                      precision: Precision) -> str | None:
    """Why a non-finite gradient is the dtype's limit rather than a bug, or None.

    A backward computed in a half dtype overflows where, for example, N / D^2 (the ratio's derivative through
    D) exceeds the dtype's range: inf there is the dtype's limit, not a rounding error, and not a bug of the
    formula; the fix is to compute the ratio in float32."""
    row, _ = _row_terms(gradients, cotangents, dtype, precision)
    backward = max(ROUNDINGS[precision.name].backward, 1)
    if row.peak * (1 + float(gamma(backward, unit_roundoff(dtype)))) < largest(dtype):
        return None
    return (f"the backward overflowed {dtype}: an exact intermediate of it reaches {row.peak:.3g} (the ratio's "
            f"derivative through D, N / D^2 times its cotangent, formed as N / D^2 or 1 / D^2 whatever the "
            f"cotangent), beyond {dtype}'s largest value "
            f"{largest(dtype):.6g}; compute the ratio (or the whole function) in float32 and cast the outputs")


# ----------------------------------------------------------------------------------------------- relations

PADDING_VALUE = -3.5  # finite in every dtype; masked out, so it must change nothing
TOKEN_SIZES = (1, 3, 7, 16, 33, 300, 512, 1031, 4096)  # the strategies' token sizes: where padding lands


def next_token_size(tokens: int) -> int:
    """The next token size above `tokens` that the strategies draw: a padded case reuses a compiled shape."""
    return next((size for size in TOKEN_SIZES if size > tokens), 2 * tokens)


def _pad_derive(case: Case) -> tuple[Case, ...]:
    batch, tokens = case.shape
    extra = next_token_size(tokens) - tokens
    return (case.with_(token_log_probs=np.hstack([case.token_log_probs, np.full((batch, extra), PADDING_VALUE)]),
                       token_mask=np.hstack([case.token_mask, np.zeros((batch, extra), bool)])),)


def _pad_compare(case, values, derived, results, tol) -> list[Comparison]:
    first = tol(case)  # the padded case's exact values and tolerances are the same
    return [Comparison(key, got, values[key], 2 * first[key]) for key, got in results[0].items()]


def _order(case: Case) -> np.ndarray:
    batch, tokens = case.shape
    return np.random.default_rng(batch * 7919 + tokens).permutation(batch)


def _permute_derive(case: Case) -> tuple[Case, ...]:
    order = _order(case)
    return (case.with_(token_log_probs=case.token_log_probs[order], advantages=case.advantages[order],
                       token_mask=case.token_mask[order]),)


def _permute_compare(case, values, derived, results, tol) -> list[Comparison]:
    order, first, second = _order(case), tol(case), tol(derived[0])
    comparisons = [Comparison(key, results[0][key], values[key][order], first[key][order] + second[key])
                   for key in VECTORS]
    return [*comparisons, Comparison(RATIO, results[0][RATIO], values[RATIO], first[RATIO] + second[RATIO])]


def _halves(case: Case) -> tuple[slice, slice]:
    half = (case.shape[0] + 1) // 2
    return slice(0, half), slice(half, case.shape[0])


def _split_derive(case: Case) -> tuple[Case, ...]:
    if case.shape[0] < 2:
        return ()
    return tuple(case.with_(token_log_probs=case.token_log_probs[rows], advantages=case.advantages[rows],
                            token_mask=case.token_mask[rows]) for rows in _halves(case))


def _split_compare(case, values, derived, results, tol) -> list[Comparison]:
    if not derived:  # a batch of one row has no halves
        return []
    first = tol(case)
    joined = {key: np.concatenate([part[key] for part in results]) for key in VECTORS}
    comparisons = [Comparison(key, joined[key], values[key], 2 * first[key]) for key in VECTORS]
    denominator = np.abs(joined[AVERAGED]).sum()
    ratio = np.abs(joined[SUMMED]).sum() / denominator if denominator > 0 else 0.0
    return [*comparisons, Comparison("magnitude_ratio from the chunks' vectors", np.asarray(ratio), values[RATIO],
                                     2 * first[RATIO])]


def _scalings(case: Case) -> tuple[tuple[str, np.ndarray], ...]:
    batch = case.shape[0]
    alternate = np.where(np.arange(batch) % 2 == 0, 1.0, -1.0)
    return (("by 2", np.full(batch, 2.0)), ("by -1", np.full(batch, -1.0)), ("by -1 every other row", alternate))


def _scale_derive(case: Case) -> tuple[Case, ...]:
    # powers of two and signs: exact, and within the magnitude bound's headroom; rows that now differ cannot
    # share one stride-0 row, so an expanded case is laid out contiguously
    return tuple(case.with_(advantages=case.advantages * factors,
                            layout="contiguous" if case.layout == "expanded" and label.endswith("row") else case.layout)
                 for label, factors in _scalings(case))


def _scale_compare(case, values, derived, results, tol) -> list[Comparison]:
    first, comparisons = tol(case), []
    for (label, factors), scaled, second in zip(_scalings(case), derived, results):
        tol_second = tol(scaled)
        comparisons += [Comparison(f"{label}: {key}", second[key], factors * values[key],
                                   np.abs(factors) * first[key] + tol_second[key]) for key in VECTORS]
        comparisons.append(Comparison(f"{label}: {RATIO}", second[RATIO], values[RATIO],
                                      first[RATIO] + tol_second[RATIO]))
    return comparisons


RELATIONS = (
    # masked columns added at the end change nothing (the divisor is the selected count, not the width)
    Relation("pad with masked columns", _pad_derive, _pad_compare),
    # permuting the rows permutes the vectors and keeps the ratio (no row is special, no axis mixed up)
    Relation("permute rows", _permute_derive, _permute_compare),
    # two halves of the batch give the same vectors, and the ratio of their joined vectors is the ratio
    Relation("split the batch", _split_derive, _split_compare),
    # scaling the advantages by 2 or -1, or negating every other row's, scales the vectors row by row and keeps
    # the ratio: a ratio of sums of magnitudes (abs after the sum breaks it as soon as the signs differ)
    Relation("scale advantages", _scale_derive, _scale_compare),
)

RATIO_BOUNDS = "ratio outside [1, max n_i]"


def _ratio_bounds(case: Case, expected: Exact, values: dict[str, np.ndarray], tol: dict[str, np.ndarray]) -> str | None:
    """When the exact denominator is positive, 1 <= R <= max n_i, within tolerance."""
    if expected.denominator == 0:
        return None
    bound, ratio = float(tol[RATIO]), float(values[RATIO])
    upper = float(expected.selected_counts.max())
    if 1 - bound <= ratio <= upper + bound:
        return None
    return f"magnitude_ratio = {ratio!r} is outside [1, max n_i = {upper:g}] (tol {bound:.3g})"


# ------------------------------------------------------------------------------------------- input domain

ADVANTAGE_KINDS = ("mixed signs", "some exactly 0", "all 0", "all equal")


def _weighted(kinds: tuple[str, ...], weights: dict[str, int]) -> tuple[str, ...]:
    """`kinds` with some repeated: a uniform draw, shrinking toward the first (simplest)."""
    return tuple(kind for kind in kinds for _ in range(weights.get(kind, 1)))


def _advantages(rng: np.random.Generator, kind: str, shape: tuple[int, ...], zero_fraction: float) -> np.ndarray:
    advantages = rng.normal(0.0, rng.choice([0.1, 1.0, 16.0]), shape)
    if kind == "some exactly 0":
        advantages[rng.random(shape) < 0.5] = 0.0
    elif kind == "all 0":
        advantages[:] = 0.0
    elif kind == "all equal" and advantages.size:
        advantages[:] = advantages[:1]
    return advantages


def _bound(values: dict[str, np.ndarray], mask: np.ndarray, dtype: str, repeats: int) -> dict[str, np.ndarray]:
    """Per row, |A_i| sum_t |l_it| <= largest(dtype) / 64, and the whole batch's sum of those below
    largest(accumulation dtype) / 64: every exact result and partial sum of the outputs is representable.
    (The row sum S_i alone is not bounded: A_i = 0 leaves it free, and a half-precision S_i can overflow,
    which forward_overflow names.)"""
    log_probs, advantages = values[LOG_PROBS], values[ADVANTAGES]
    tokens = log_probs.shape[1]
    row_magnitudes = np.abs(advantages) * np.abs(np.where(mask, log_probs, 0)).sum(axis=1) if tokens else 0
    worst = max(float(np.max(row_magnitudes, initial=0.0)) * 64 / largest(dtype),
                float(np.sum(row_magnitudes)) * repeats * 64 / largest(accumulation_dtype(dtype)))
    if worst <= 1:
        return values
    factor = 2.0 ** -np.ceil(np.log2(worst) / 2)  # split between the two factors: both stay normal
    return {LOG_PROBS: log_probs * factor, ADVANTAGES: advantages * factor}


DOMAIN = Domain(
    menus={LOG_PROBS: ValueMenu("log-prob values", TOKEN_VALUE_KINDS, draw_values, one_sign="log-probs"),
           ADVANTAGES: ValueMenu("advantages", _weighted(ADVANTAGE_KINDS, {"mixed signs": 3}), _advantages,
                                 split_kinds=("mixed signs", "mixed signs", "all equal", "some exactly 0"))},
    bound=_bound,
)


# ----------------------------------------------------------------------------------------------- cotangents

COTANGENT_KINDS = ("all outputs", "ratio only", "vectors only", "zero")


def cotangents(kind: str, rng: np.random.Generator, case: Case) -> dict[str, np.ndarray]:
    batch = case.shape[0]
    drawn = {SUMMED: round_to(rng.normal(size=batch), case.dtype),
             AVERAGED: round_to(rng.normal(size=batch), case.dtype),
             RATIO: round_to(np.array(rng.normal()), case.dtype)}
    if kind == "ratio only":
        drawn[SUMMED][:] = drawn[AVERAGED][:] = 0.0
    elif kind == "vectors only":
        drawn[RATIO] = np.array(0.0)
    elif kind == "zero":
        drawn = {key: np.zeros_like(value) for key, value in drawn.items()}
    return complete_cotangents(drawn, batch)


# -------------------------------------------------------------------------------------------------- record

EXAMPLES = (
    Example("two rows, all selected", {LOG_PROBS: [[-1, -2], [-3, -4]], ADVANTAGES: [2, -1], MASK: [[1, 1], [1, 1]]},
            {SUMMED: [-6, 7], AVERAGED: [-3, 3.5], RATIO: 2}),
    Example("one token of three", {LOG_PROBS: [[-2, -5, -8]], ADVANTAGES: [3], MASK: [[1, 0, 0]]},
            {SUMMED: [-6], AVERAGED: [-6], RATIO: 1}),
    Example("all masked", {LOG_PROBS: [[-1, -2], [-3, -4]], ADVANTAGES: [2, -1], MASK: [[0, 0], [0, 0]]},
            {SUMMED: [0, 0], AVERAGED: [0, 0], RATIO: 0}),
)

CONTRACT = Contract(
    name="magnitude",
    title="sequence-summed vs token-averaged magnitudes",
    signature="fn(token_log_probs, advantages, token_mask) -> dict",
    inputs=(
        Input(LOG_PROBS, ("batch", "tokens"), "float", "tokens", differentiable=True, mesh=("data", "sequence")),
        Input(ADVANTAGES, ("batch",), "float", "rows", differentiable=True, mesh=("data",)),
        Input(MASK, ("batch", "tokens"), "bool", "mask", mesh=("data", "sequence")),
    ),
    outputs=(
        Output(SUMMED, ("batch",), replicated=("sequence",)),
        Output(AVERAGED, ("batch",), replicated=("sequence",)),
        Output(RATIO, (), replicated=("data", "sequence")),
    ),
    returns_mapping=True,
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
    invariants=(Invariant(RATIO_BOUNDS, _ratio_bounds),),
    cotangent_kinds=COTANGENT_KINDS,
    cotangents=cotangents,
    examples=EXAMPLES,
    trivial_cotangent_kinds=("zero",),
)
