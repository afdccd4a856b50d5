"""The sha256 of 300 derandomized magnitude cases (their labelled stories and values, dtype, layout, device):
`python -m tests.draw_digest` from the checkout. A change of the suite that must not change what is drawn for
a seed (a refactor) keeps this digest; docs/measurements.md records its values and why they last changed."""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from fuzz.judge.draws import draw_case

CASES = 300


def digest() -> tuple[int, str]:
    """(cases drawn, their sha256)."""
    sha, count = hashlib.sha256(), 0

    @seed(0)
    @settings(max_examples=CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        nonlocal count
        case = draw_case(lambda strategy, label: data.draw(strategy, label=label),
                         dtypes=["float16", "bfloat16", "float32", "float64"],
                         layouts=["contiguous", "transposed", "step-sliced", "expanded", "offset"], devices=["cpu"])
        sha.update(repr(case.story).encode())
        for name in ("token_log_probs", "advantages", "token_mask"):
            sha.update(np.ascontiguousarray(case.values[name]).tobytes())
        sha.update(f"{case.dtype}{case.layout}{case.device}".encode())
        count += 1

    draw()
    return count, sha.hexdigest()


if __name__ == "__main__":
    cases, value = digest()
    print(f"cases {cases} {value}")
