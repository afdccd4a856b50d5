"""The one tolerance model, derived from floating-point error bounds; every check uses it.

Two precisions share it (the derivation is in docs/tolerance.md):

- CONTRACT, what any correct implementation may do: accumulations (the sum over tokens, the count, the
  batch sums of the ratio) carry at least float32; every elementwise step (the product with A_i, the
  division by n_i, casts, the ratio's division, each elementwise step of the backward) may round in the
  input dtype, up to a counted number of times per output. The counts are those of the plain formulations
  (docs/tolerance.md, "Counting the roundings"), and every bound is a worst case, so correct code passes at
  any budget. This is what `check` holds a user's function to.
- STRICT, the built-ins' promise: accumulate in at least float32 and round once to the output dtype (one
  rounding per output, SAFETY = 2 admitting a second). A test holds every built-in to it.

Notation: u_acc is the unit roundoff of the accumulation dtype (float32 for half inputs, else the input's),
u_out that of the output dtype, eta_out its smallest subnormal, gamma(k, u) = k u / (1 - k u) the bound on k
chained roundings, and M_i = sum_t m_it |A_i l_it| the magnitude the row's summation can lose precision
against. Rows with n_i = 0 and a ratio with D = 0 have tolerance exactly 0: they must be exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from impls.dtypes import accumulation_dtype, largest, smallest_subnormal, unit_roundoff
from reference.forward import Expected
from reference.vjp import Gradients, complete_cotangents

SAFETY = 2.0  # the strict model's factor: admits a second rounding to the output dtype
# The reference's own error: fsum per row, then one float64 rounding per operation (reference/forward.py).
REFERENCE_VECTOR_ERROR = 2.0**-51
REFERENCE_RATIO_ERROR = 2.0**-49


@dataclass(frozen=True)
class Precision:
    """How many roundings in the output dtype an implementation may make outside its accumulations.

    `summed`, `averaged`: elementwise roundings on the way to each s_i and a_i (per token before the sum,
    or per row after it); `ratio`: the ratio's own roundings after its batch sums (N and D rounded, the
    division, casts); `backward`: the roundings any one term of the row gradient g_i goes through, the
    final products with A_i or S_i and the casts included. None of these apply to STRICT, which keeps the
    original one-rounding model.
    """

    name: str
    summed: int = 1
    averaged: int = 1
    ratio: int = 1
    backward: int = 1
    strict: bool = False


# The counts of the plain formulations (docs/tolerance.md): s_i = A_i * sum(where(mask, lp, 0)) rounds the
# sum and the product (2); a_i = s_i / float(n_i) adds the count's cast and the division (4); the ratio
# rounds N and D and divides (3), or divides each batch sum by the batch size first, as a hand-written
# mean does (5); torch's autograd of that graph in the input dtype puts the ratio's D-term through
# 3 (division backward) + 1 (+ c_a) + 2 (/ n, the count's cast) + 1 (a mean's / batch) + 2 (sums into g_i)
# + 1 (* A_i) = 10 roundings.
CONTRACT = Precision("contract", summed=2, averaged=4, ratio=5, backward=10)
STRICT = Precision("strict", strict=True)
PRECISIONS: dict[str, Precision] = {p.name: p for p in (CONTRACT, STRICT)}


def gamma(k: np.ndarray | float, u: float) -> np.ndarray:
    ku = np.asarray(k, dtype=np.float64) * u
    with np.errstate(over="ignore", divide="ignore"):
        return np.where(ku < 1, ku / np.maximum(1 - ku, np.finfo(np.float64).tiny), np.inf)


@dataclass(frozen=True)
class Tolerance:
    sequence_summed: np.ndarray
    token_averaged: np.ndarray
    magnitude_ratio: np.ndarray  # shape ()

    def as_dict(self) -> dict[str, np.ndarray]:
        return {
            "sequence_summed": self.sequence_summed,
            "token_averaged": self.token_averaged,
            "magnitude_ratio": self.magnitude_ratio,
        }


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


def _forward_bounds(expected: Expected, dtype: str, precision: Precision) -> _ForwardBounds:
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
        summed = (summation + gamma(precision.summed, u_out) * (magnitude + summation)
                  + precision.summed * underflow + REFERENCE_VECTOR_ERROR * np.abs(expected.sequence_summed))
        averaged = ((summation + gamma(precision.averaged, u_out) * (magnitude + summation)) / safe_counts
                    + precision.averaged * underflow + REFERENCE_VECTOR_ERROR * np.abs(expected.token_averaged))
    summed, averaged = np.where(active, summed, 0.0), np.where(active, averaged, 0.0)
    # The batch sums of |s'_i| and |a'_i|: in any order, in at least float32, over values off by the bounds.
    batch_gamma = gamma(len(counts), u_acc)
    slack = 0.0 if precision.strict else 1.0  # strict: today's first-order form, kept as it was
    return _ForwardBounds(
        u_acc, u_out, eta, summed, averaged,
        numerator=float(summed.sum() + batch_gamma * (expected.numerator + slack * summed.sum())),
        denominator=float(averaged.sum() + batch_gamma * (expected.denominator + slack * averaged.sum())),
    )


def tolerance(expected: Expected, dtype: str, precision: Precision = CONTRACT) -> Tolerance:
    """Per-element absolute tolerances for an implementation running in `dtype`."""
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
            own = gamma(precision.ratio, bounds.u_out)  # N and D rounded, the division, casts
            tol_ratio = (propagated + own * (ratio + propagated) + precision.ratio * bounds.eta
                         + REFERENCE_RATIO_ERROR * ratio)
    factor = SAFETY if precision.strict else 1.0
    return Tolerance(
        sequence_summed=factor * bounds.summed,
        token_averaged=factor * bounds.averaged,
        magnitude_ratio=np.array(float(tol_ratio)),
    )


def error_ratio(got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """|got - want| / tol element-wise: <= 1 passes. 0/0 is 0; any error against a zero tolerance is inf."""
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(np.asarray(got, dtype=np.float64) - want)
        ratio = np.where(err == 0, 0.0, err / tol)
    return np.where(np.isnan(ratio), np.inf, ratio)


def ulp_error(got: np.ndarray, want: np.ndarray, dtype: str, scale: np.ndarray | float = 0.0) -> np.ndarray:
    """|got - want| in units in the last place of `dtype` at the exact value `want`, or at `scale` where that
    is larger (inf if not finite).

    A result rounded once from the exact value is within 0.5 ulp; the figure shows how much more an
    implementation loses, whether or not it conforms. `scale` is the magnitude the computation works at
    (the terms a sum or a gradient is made of): where those cancel to a tiny or zero exact value, ulps of
    the exact value would only measure the cancellation."""
    want = np.asarray(want, dtype=np.float64)
    bits = _significand_bits(dtype)
    _, exponent = np.frexp(np.maximum(np.abs(want), scale))  # |want| = m 2**e, 0.5 <= m < 1
    ulp = np.maximum(np.ldexp(1.0, exponent - bits), smallest_subnormal(dtype))
    with np.errstate(invalid="ignore"):
        err = np.abs(np.asarray(got, dtype=np.float64) - want) / ulp
    return np.where(np.isfinite(err), err, np.inf)


def _significand_bits(dtype: str) -> int:
    return -int(np.round(np.log2(unit_roundoff(dtype))))  # u = 2**-p


@dataclass(frozen=True)
class GradientTolerance:
    token_log_probs: np.ndarray  # (batch, tokens); exactly 0 at masked positions
    advantages: np.ndarray  # (batch,); exactly 0 for fully masked rows
    token_log_probs_scale: np.ndarray  # |A_i| T_i: the magnitude the gradient is computed at (for ulps)
    advantages_scale: np.ndarray  # |S_i| T_i


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
    c_ratio = abs(float(complete["magnitude_ratio"]))
    terms = np.abs(complete["sequence_summed"]) + np.abs(complete["token_averaged"]) / safe_counts
    through_n, through_d = 0.0, np.zeros(batch)
    propagated = np.zeros(batch)
    kink = np.zeros(batch, bool)
    peak = 0.0
    n_, d_ = expected.numerator, expected.denominator
    if d_ > 0 and c_ratio > 0:
        through_n = c_ratio / d_
        through_d = c_ratio * n_ / (d_ * d_ * safe_counts)
        terms = terms + through_n + through_d
        tol = tolerance(expected, dtype, precision)
        kink = ((np.abs(expected.sequence_summed) <= tol.sequence_summed)
                | (np.abs(expected.token_averaged) <= tol.token_averaged)) & (counts > 0)
        d_numerator, d_denominator = bounds.numerator, bounds.denominator
        if d_denominator >= d_:
            propagated[:] = np.inf
        elif precision.strict:  # today's first-order form
            rho_d, rho_n = d_denominator / (d_ - d_denominator), d_numerator / n_
            propagated = through_n * rho_d + through_d * (rho_n + 2 * rho_d)
        else:  # exact worst cases: |1/D' - 1/D| <= dD / (D (D - dD)); N'/D'^2 <= (N + dN) / (D - dD)^2
            rho_d, rho_n = d_denominator / (d_ - d_denominator), d_numerator / n_
            propagated = through_n * rho_d + through_d * ((1 + rho_n) * (1 + rho_d) ** 2 - 1)
        peak = max(through_n, c_ratio * n_ / (d_ * d_), n_ / (d_ * d_), float(np.max(through_d, initial=0.0)))
    scale = np.abs(gradients.input_advantages) + np.abs(expected.selected_sums)
    peak = max(peak, float(np.max(terms * np.maximum(scale, 1.0), initial=0.0)))
    return _RowGradientTerms(terms, through_n, through_d, kink, propagated, peak), bounds


def gradient_tolerance(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                       precision: Precision = CONTRACT) -> GradientTolerance:
    """Tolerances for the VJP (derivation in docs/tolerance.md, "Gradients").

    The row gradient g_i = c_s_i + c_a_i / n_i + c_R (sign(s_i) / D - N sign(s_i) / (D^2 n_i)) is computed
    from D' and N' that carry the forward errors, and (CONTRACT) each of its terms may go through
    `precision.backward` roundings in the input dtype: the error is bounded by the terms' magnitudes T_i,
    not by |g_i|, since the terms can cancel. Then d/dl_it = A_i g_i and d/dA_i = S_i g_i. Where s_i is 0
    or within its forward tolerance of 0, any subgradient of |x| in [-1, 1] is right: that row's tolerance
    is widened by the whole range the ratio's terms can take.
    """
    row, bounds = _row_terms(gradients, cotangents, dtype, precision)
    with np.errstate(invalid="ignore"):  # 0 * inf where no bound exists: NaN, made inf below
        tol_lp, tol_adv = _gradient_bounds(gradients, row, bounds, precision)
    tol_lp, tol_adv = np.nan_to_num(tol_lp, nan=np.inf), np.nan_to_num(tol_adv, nan=np.inf)
    expected = gradients.expected
    active = expected.selected_counts > 0
    abs_adv = np.abs(gradients.input_advantages)
    mask = gradients.token_mask
    return GradientTolerance(
        token_log_probs=np.where(mask & active[:, None], tol_lp, 0.0),
        advantages=np.where(active, tol_adv, 0.0),
        token_log_probs_scale=np.where(mask, (abs_adv * row.terms)[:, None], 0.0),
        advantages_scale=np.abs(expected.selected_sums) * row.terms,
    )


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
        rounding = gamma(precision.backward, u_out)
        row_error = rounding * (row.terms + row.propagated) + row.propagated + REFERENCE_VECTOR_ERROR * row.terms
        underflow = precision.backward * eta
        tol_lp = np.broadcast_to((abs_adv * row_error + underflow * np.maximum(abs_adv, 1.0))[:, None],
                                 gradients.token_log_probs.shape)
        # S_i as the implementation has it: summed in at least float32, perhaps rounded once to the dtype.
        sum_error = summation + u_out * gradients.absolute_selected_sums
        tol_adv = (np.abs(expected.selected_sums) * row_error + sum_error * (row.terms + row_error + kink_range)
                   + underflow * np.maximum(np.abs(expected.selected_sums), 1.0))
    tol_lp = tol_lp + (abs_adv * kink_range)[:, None]
    tol_adv = tol_adv + np.abs(expected.selected_sums) * kink_range
    return tol_lp, tol_adv


def backward_overflows(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                       precision: Precision = CONTRACT) -> float | None:
    """The largest exact intermediate of the backward pass if it can overflow `dtype`, else None.

    A backward computed in a half dtype overflows where, for example, N / D^2 (the ratio's derivative
    through D) exceeds the dtype's range: inf there is the dtype's limit, not a rounding error, and not a
    bug of the formula; the fix is to compute the ratio in float32."""
    row, _ = _row_terms(gradients, cotangents, dtype, precision)
    rounding = float(gamma(max(precision.backward, 1), unit_roundoff(dtype)))
    return row.peak if row.peak * (1 + rounding) >= largest(dtype) else None
