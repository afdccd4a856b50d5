"""A framework-neutral input: what the fuzzer draws, the reference judges and every adapter materializes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from impls.dtypes import DTYPE_NAMES, round_to


@dataclass(frozen=True, eq=False)
class Case:
    """Inputs as float64 values already rounded to `dtype`, plus how to lay them out and where.

    Masked-out log-probs may hold any value, -inf and NaN included; selected ones are finite.
    """

    token_log_probs: np.ndarray  # (batch, tokens) float64
    advantages: np.ndarray  # (batch,) float64
    token_mask: np.ndarray  # (batch, tokens) bool
    dtype: str = "float32"
    layout: str = "contiguous"
    device: str = "cpu"
    story: tuple[tuple[str, object], ...] = ()  # the labelled draws that made it, for reports

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {DTYPE_NAMES}, got {self.dtype!r}")
        for name in ("token_log_probs", "advantages"):
            values = np.asarray(getattr(self, name), dtype=np.float64)
            rounded = round_to(values, self.dtype)
            if not np.array_equal(rounded, values, equal_nan=True):
                raise ValueError(f"{name} holds values that are not exactly representable in {self.dtype}")
            object.__setattr__(self, name, values)
        object.__setattr__(self, "token_mask", np.asarray(self.token_mask, dtype=bool))

    @property
    def shape(self) -> tuple[int, int]:
        batch, tokens = self.token_log_probs.shape
        return batch, tokens

    def with_(self, **changes: object) -> Case:
        return replace(self, **changes)
