"""The exact float64 vector-Jacobian product of the three outputs with respect to the log-probs and the
advantages.

With S_i = sum_t m_it l_it, s_i = A_i S_i, a_i = s_i / n_i (0 when n_i = 0), N = sum_i |s_i|,
D = sum_i |a_i|, R = N / D (0 when D = 0), and cotangents (c_s, c_a, c_R), the chain rule gives, for a row
with n_i > 0 (d|x|/dx = sign(x), sign(0) = 0):

    dR/ds_i = sign(s_i) / D                       (through N)
    dR/da_i = -N sign(a_i) / D**2                 (through D), and da_i/ds_i = 1 / n_i
    g_i     = c_s_i + c_a_i / n_i + c_R (sign(s_i) / D - N sign(s_i) / (D**2 n_i))   [c_R terms only if D > 0]

and then d/dl_it = m_it A_i g_i and d/dA_i = S_i g_i. A row with n_i = 0 has s_i = a_i = 0 whatever its
inputs: every gradient of it is 0, and masked positions get exactly 0. When D = 0, R is identically 0 in a
neighbourhood (the where-guard), so the ratio contributes no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference.forward import OUTPUT_KEYS, Expected, reference


@dataclass(frozen=True)
class Gradients:
    token_log_probs: np.ndarray  # (batch, tokens) float64
    advantages: np.ndarray  # (batch,) float64
    row_gradients: np.ndarray  # g_i = d(loss)/d s_i: what the tolerance model scales
    expected: Expected
    input_advantages: np.ndarray  # A_i
    token_mask: np.ndarray
    absolute_selected_sums: np.ndarray  # sum_t m_it |l_it|


def complete_cotangents(cotangents: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """A cotangent for each of the three outputs, as float64 arrays of their shapes; a missing one is 0."""
    shapes = dict(zip(OUTPUT_KEYS, [(batch,), (batch,), ()]))
    return {key: np.asarray(cotangents[key], dtype=np.float64) if key in cotangents else np.zeros(shape)
            for key, shape in shapes.items()}


def vjp(
    token_log_probs: np.ndarray,
    advantages: np.ndarray,
    token_mask: np.ndarray,
    cotangents: dict[str, np.ndarray],
    expected: Expected | None = None,
) -> Gradients:
    """Exact gradients of sum(c_s * s) + sum(c_a * a) + c_R * R; missing cotangents count as 0. `expected`,
    where the caller has it, is reference() of the same inputs."""
    if expected is None:
        expected = reference(token_log_probs, advantages, token_mask)
    complete = complete_cotangents(cotangents, expected.selected_counts.shape[0])
    c_summed, c_averaged = complete["sequence_summed"], complete["token_averaged"]
    c_ratio = float(complete["magnitude_ratio"])
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
