"""Value generators the contracts' input domains share: NumPy only, seeded by the strategies' drawn seed.

Bulk values come from a generator, not from Hypothesis one by one: drawing thousands of floats is slow and
shrinks no better than a drawn seed does."""

from __future__ import annotations

import numpy as np

# Kinds of per-token values: typical of log-probs (<= 0, some exactly 0), small integers (exact sums), or
# general finite values of both signs over 24 binades (cancellation, every exponent).
TOKEN_VALUE_KINDS = ("log-probs", "small integers", "general")


def draw_values(rng: np.random.Generator, kind: str, shape: tuple[int, ...], zero_fraction: float) -> np.ndarray:
    """Values of `kind`, a `zero_fraction` of them exactly 0."""
    if kind == "log-probs":
        values = -rng.exponential(rng.choice([0.05, 1.0, 8.0]), shape)
    elif kind == "small integers":
        values = rng.integers(-8, 1, shape).astype(np.float64)
    elif kind == "general":
        values = rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(-12, 12, shape))
    else:
        raise ValueError(f"unknown kind of values {kind!r}")
    return np.where(rng.random(shape) < zero_fraction, 0.0, values)
