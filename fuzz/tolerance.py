"""The one tolerance model, derived from floating-point error bounds; every check uses it.

Notation: u_acc is the unit roundoff of the accumulation dtype (float32 for half inputs, else the input's),
u_out that of the output dtype, eta_out its smallest subnormal (the absolute error of a rounding that
underflows), gamma(k, u) = k u / (1 - k u) the classic bound for k chained roundings, and
M_i = sum_t m_it |A_i l_it| the magnitude the row's summation can lose precision against.

sequence_summed_i: n_i - 1 additions, one product per term or one product of the sum, and the
  conversion to the accumulation dtype give |err| <= gamma(n_i + 2, u_acc) M_i; the final rounding to the
  output dtype adds u_out |s_i| + eta_out.
token_averaged_i: one more rounding for the division by n_i: gamma(n_i + 2, u_acc) M_i / n_i
  + u_out |a_i| + eta_out.
magnitude_ratio R = N / D with N = sum |s_i|, D = sum |a_i|: with dN = sum_i tol(s_i) + gamma(batch, u_acc) N
  and dD likewise, |R' - R| <= (N + dN)/(D - dD) - N/D = (dN + R dD) / (D - dD) when dD < D, plus the
  division's and the output's roundings (u_acc + u_out) R + eta_out. When dD >= D no bound exists (the
  computed D may be 0): the tolerance is infinite and only finiteness is checked.
Rows with n_i = 0 and a ratio with D = 0 have tolerance exactly 0: they must be exactly 0.

Every bound is multiplied by SAFETY = 2, which admits a second rounding to the output dtype (a
ratio or average computed from already-rounded outputs) and the reference's own error (at most 2**-52
relative); it stays far below a relative bias of 2**-12 for float32 and float64 rows of under ~2000 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from impls.dtypes import accumulation_dtype, smallest_subnormal, unit_roundoff
from reference import Expected, Gradients, complete_cotangents

SAFETY = 2.0


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
    """The forward error bounds before SAFETY: what the forward and the gradient tolerances share."""

    u_acc: float
    u_out: float
    eta: float
    summed: np.ndarray  # bound on |s'_i - s_i|
    averaged: np.ndarray  # bound on |a'_i - a_i|
    numerator: float  # dN, bound on the computed N = sum |s_i|
    denominator: float  # dD, bound on the computed D = sum |a_i|


def _forward_bounds(expected: Expected, dtype: str) -> _ForwardBounds:
    u_acc = unit_roundoff(accumulation_dtype(dtype))
    u_out = unit_roundoff(dtype)
    eta = smallest_subnormal(dtype)
    counts = expected.selected_counts
    active = counts > 0
    summation = gamma(counts + 2, u_acc) * expected.absolute_row_sums
    summed = np.where(active, summation + u_out * np.abs(expected.sequence_summed) + eta, 0.0)
    averaged = np.where(
        active, summation / np.maximum(counts, 1) + u_out * np.abs(expected.token_averaged) + eta, 0.0
    )
    batch_gamma = gamma(len(counts), u_acc)
    return _ForwardBounds(
        u_acc, u_out, eta, summed, averaged,
        numerator=float(summed.sum() + batch_gamma * expected.numerator),
        denominator=float(averaged.sum() + batch_gamma * expected.denominator),
    )


def tolerance(expected: Expected, dtype: str) -> Tolerance:
    """Per-element absolute tolerances for an implementation running in `dtype`."""
    bounds = _forward_bounds(expected, dtype)
    denominator, ratio = expected.denominator, float(expected.magnitude_ratio)
    if denominator == 0:
        tol_ratio = 0.0
    elif bounds.denominator >= denominator:
        tol_ratio = np.inf
    else:
        propagated = (bounds.numerator + ratio * bounds.denominator) / (denominator - bounds.denominator)
        tol_ratio = propagated + (bounds.u_acc + bounds.u_out) * ratio + bounds.eta
    return Tolerance(
        sequence_summed=SAFETY * bounds.summed,
        token_averaged=SAFETY * bounds.averaged,
        magnitude_ratio=np.array(SAFETY * tol_ratio),
    )


def error_ratio(got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """|got - want| / tol element-wise: <= 1 passes. 0/0 is 0; any error against a zero tolerance is inf."""
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(np.asarray(got, dtype=np.float64) - want)
        ratio = np.where(err == 0, 0.0, err / tol)
    return np.where(np.isnan(ratio), np.inf, ratio)


@dataclass(frozen=True)
class GradientTolerance:
    token_log_probs: np.ndarray  # (batch, tokens); exactly 0 at masked positions
    advantages: np.ndarray  # (batch,); exactly 0 for fully masked rows


def gradient_tolerance(gradients: Gradients, cotangents: dict[str, np.ndarray], dtype: str) -> GradientTolerance:
    """Tolerances for the VJP (derivation in docs/tolerance.md, "Gradients").

    The row gradient g_i = c_s_i + c_a_i / n_i + c_R (sign(s_i) / D - N sign(s_i) / (D^2 n_i)) is computed
    from D' and N' that carry the forward errors dD and dN, so with rho_D = dD / (D - dD) and
    rho_N = dN / N, |g'_i - g_i| <= E_i = gamma(6, u_acc) T_i + |c_R| / D (rho_D)
    + |c_R| N / (D^2 n_i) (rho_N + 2 rho_D) (to first order), T_i the sum of the terms' magnitudes. Then
    d/dl_it = A_i g_i adds one rounding, d/dA_i = S_i g_i adds the summation error of S_i; both are
    rounded to the input dtype. Kinks of |x| are kept away by the strategy (see fuzz/gradients.py).
    """
    expected = gradients.expected
    bounds = _forward_bounds(expected, dtype)
    u_acc, u_out, eta = bounds.u_acc, bounds.u_out, bounds.eta
    counts = expected.selected_counts
    active = counts > 0
    safe_counts = np.maximum(counts, 1)
    batch = len(counts)
    complete = complete_cotangents(cotangents, batch)
    c_summed, c_averaged = np.abs(complete["sequence_summed"]), np.abs(complete["token_averaged"])
    c_ratio = abs(float(complete["magnitude_ratio"]))
    terms = c_summed + c_averaged / safe_counts
    propagated = np.zeros(batch)
    if expected.denominator > 0 and c_ratio > 0:
        n_, d_ = expected.numerator, expected.denominator
        d_denominator, d_numerator = bounds.denominator, bounds.numerator
        through_n = c_ratio / d_
        through_d = c_ratio * n_ / (d_ * d_ * safe_counts)
        terms = terms + through_n + through_d
        if d_denominator >= d_:
            propagated[:] = np.inf
        else:
            rho_d = d_denominator / (d_ - d_denominator)
            rho_n = d_numerator / n_
            propagated = through_n * rho_d + through_d * (rho_n + 2 * rho_d)
    row_error = gamma(6, u_acc) * terms + propagated
    row = np.abs(gradients.row_gradients)
    abs_adv = np.abs(gradients.input_advantages)
    tol_lp = (abs_adv * (row_error + u_acc * row))[:, None] + u_out * np.abs(gradients.token_log_probs) + eta
    summation = gamma(counts + 1, u_acc) * gradients.absolute_selected_sums
    tol_adv = (np.abs(expected.selected_sums) * row_error + summation * (row + row_error)
               + u_out * np.abs(gradients.advantages) + eta)
    mask = gradients.token_mask
    return GradientTolerance(
        token_log_probs=SAFETY * np.where(mask & active[:, None], tol_lp, 0.0),
        advantages=SAFETY * np.where(active, tol_adv, 0.0),
    )
