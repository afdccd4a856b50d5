"""A snippet's array literals: Python that rebuilds the array exactly (every value, -0.0, inf and NaN, the shape),
within the terminal's columns, a run of one value written once with its count."""

from __future__ import annotations

from math import inf, nan

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fuzz.report.literals import LAST_WIDTH, LINE_WIDTH, bool_literal, literal

# few distinct values, so that runs of one value are common; the others anything a float64 holds
FEW_VALUES = st.sampled_from([0.0, -0.0, 0.25, -1.5, inf, -inf, nan, 0.004079196522829097])
SHAPES = st.one_of(st.tuples(st.integers(1, 60)), st.tuples(st.integers(1, 9), st.integers(1, 60)))


def _rebuilt(text: str, dtype: type) -> np.ndarray:
    return np.array(eval("(" + text + ")", {"inf": inf, "nan": nan}), dtype=dtype)  # as inside the call's brackets


def _fits(text: str) -> bool:
    lines = text.split("\n")
    return all(len(line) <= 4 + LINE_WIDTH for line in lines) and len(lines[-1]) <= 4 + LAST_WIDTH


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_float_literal_rebuilds_the_array_exactly_within_the_columns(data):
    values = data.draw(arrays(np.float64, data.draw(SHAPES, label="shape"),
                              elements=st.one_of(FEW_VALUES, st.floats(width=64))), label="values")
    text = literal(values)
    rebuilt = _rebuilt(text, np.float64)
    assert rebuilt.shape == values.shape
    assert np.array_equal(rebuilt, values, equal_nan=True)
    numbers = ~np.isnan(values)  # a NaN's sign and payload are not kept: no check reads them
    assert np.array_equal(np.signbit(rebuilt[numbers]), np.signbit(values[numbers]))  # -0.0 stays -0.0
    assert _fits(text), text


@settings(max_examples=200, deadline=None)
@given(arrays(np.bool_, SHAPES))
def test_a_mask_literal_rebuilds_the_mask_exactly_within_the_columns(mask):
    text = bool_literal(mask)
    rebuilt = _rebuilt(text, bool)
    assert rebuilt.shape == mask.shape and np.array_equal(rebuilt, mask)
    assert _fits(text), text


def test_a_rows_weight_on_its_selected_tokens_reads_as_one_value_and_its_count():
    """A reduction's gradient: one weight per row on its selected tokens, 0 on the others; its mask: prefix
    lengths. A row of 1031 tokens is a short line."""
    gradient = np.zeros((4, 7))
    gradient[0], gradient[1, :3], gradient[3, :5] = 0.25, 0.5, 0.004079196522829097
    text = literal(gradient)
    for row in ["[[0.25] * 7,", "[0.5] * 3 + [0.0] * 4,", "[0.0] * 7,", "[0.004079196522829097] * 5 + [0.0, 0.0]]"]:
        assert row in text
    assert len(text.splitlines()) <= 3  # the call's line, then 2
    mask = np.zeros((3, 1031), bool)
    mask[0, :700], mask[2, :5] = True, True
    text = bool_literal(mask)
    for row in ["[[True] * 700 + [False] * 331,", "[False] * 1031,", "[True] * 5 + [False] * 1026]"]:
        assert row in text
    assert len(text.splitlines()) <= 3
    assert bool_literal(np.ones((3, 1031), bool)) == "[[True] * 1031] * 3"
    assert literal(np.array([1.0, 2.0, 3.0])) == "[1.0, 2.0, 3.0]"  # short: as it is
