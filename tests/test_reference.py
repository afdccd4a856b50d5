import math

import ml_dtypes
import numpy as np
import pytest

from reference.magnitude import reference


def test_hand_computed_examples():
    lp = np.array([[-1.0, -2.0], [-3.0, -4.0]])
    e = reference(lp, np.array([2.0, -1.0]), np.ones((2, 2), bool))
    assert e.sequence_summed.tolist() == [-6.0, 7.0]
    assert e.token_averaged.tolist() == [-3.0, 3.5]
    assert float(e.magnitude_ratio) == 2.0
    e = reference(np.array([[-2.0, -5.0, -8.0]]), np.array([3.0]), np.array([[True, False, False]]))
    assert e.outputs()["sequence_summed"].tolist() == [-6.0] and float(e.magnitude_ratio) == 1.0
    e = reference(lp, np.array([2.0, -1.0]), np.zeros((2, 2), bool))
    assert e.sequence_summed.tolist() == [0.0, 0.0] and float(e.magnitude_ratio) == 0.0


def test_mixed_rows_and_counts():
    lp = np.array([[-1.0, -1.0, -1.0, -1.0], [-2.0, -9.0, -9.0, -9.0]])
    mask = np.array([[True, True, True, True], [True, False, False, False]])
    e = reference(lp, np.array([1.0, 1.0]), mask)
    # summed [-4, -2], averaged [-1, -2]: ratio 6 / 3
    assert e.sequence_summed.tolist() == [-4.0, -2.0]
    assert e.token_averaged.tolist() == [-1.0, -2.0]
    assert float(e.magnitude_ratio) == 2.0
    assert e.selected_counts.tolist() == [4, 1]


def test_fsum_is_exact_where_a_naive_float64_sum_is_not():
    row = np.array([[1.0, 1e-16, 1e-16, 1e-16, 1e-16, -1.0]])
    naive = float(np.sum(row[0][:5]) + row[0][5])  # left to right: the 1e-16s vanish against 1.0
    assert naive == 0.0
    e = reference(row, np.array([1.0]), np.ones((1, 6), bool))
    assert float(e.sequence_summed[0]) == pytest.approx(4e-16, rel=1e-15)
    assert float(e.sequence_summed[0]) == math.fsum(row[0])


def test_accepts_every_dtype_at_its_exact_value():
    lp = np.array([[-0.1, -2.5]])
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        rounded = lp.astype(dtype)
        e = reference(rounded, np.ones(1, dtype), np.ones((1, 2), bool))
        assert float(e.sequence_summed[0]) == float(rounded.astype(np.float64).sum())


def test_masked_positions_may_hold_inf_and_nan():
    lp = np.array([[-1.0, -np.inf, np.nan]])
    e = reference(lp, np.array([2.0]), np.array([[True, False, False]]))
    assert e.sequence_summed.tolist() == [-2.0]


def test_degenerate_shapes():
    e = reference(np.zeros((0, 3)), np.zeros(0), np.zeros((0, 3), bool))
    assert e.sequence_summed.shape == (0,) and float(e.magnitude_ratio) == 0.0
    e = reference(np.zeros((2, 0)), np.ones(2), np.zeros((2, 0), bool))
    assert e.token_averaged.tolist() == [0.0, 0.0] and float(e.magnitude_ratio) == 0.0


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((np.array([[np.nan]]), np.ones(1), np.ones((1, 1), bool)), ValueError, "finite wherever"),
        ((np.array([[-np.inf]]), np.ones(1), np.ones((1, 1), bool)), ValueError, "finite wherever"),
        ((np.ones((1, 1)), np.array([np.inf]), np.ones((1, 1), bool)), ValueError, "advantages must be finite"),
        ((np.ones(3), np.ones(3), np.ones(3, bool)), ValueError, "token_log_probs must have 2"),
        ((np.ones((2, 3)), np.ones(3), np.ones((2, 3), bool)), ValueError, r"advantages must have shape \(2,\)"),
        ((np.ones((2, 3)), np.ones(2), np.ones((2, 3))), TypeError, "token_mask must be a bool"),
        ((np.ones((2, 3)), np.ones(2), np.ones((3, 2), bool)), ValueError, r"token_mask must have shape \(2, 3\)"),
        ((np.ones((2, 3), np.int64), np.ones(2), np.ones((2, 3), bool)), TypeError, "token_log_probs must have"),
        (([[1.0]], np.ones(1), np.ones((1, 1), bool)), TypeError, "numpy.ndarray"),
    ],
)
def test_rejects_bad_input(args, error, message):
    with pytest.raises(error, match=message):
        reference(*args)
