"""Determinism is reported, never judged: a cell says whether two calls on the same inputs gave identical bits."""

from __future__ import annotations

import textwrap

from fuzz.cli import check_parser, run_check
from fuzz.report.matrix import render_matrix

SHUFFLED_SUM = """
    import numpy as np

    _rng = np.random.default_rng()

    def normalize(lp, adv, mask):
        # Correct, but its ratio's last bit depends on the call, as a GPU kernel's atomic adds make it:
        # one ulp up or down, far inside the tolerance.
        acc = np.float64 if lp.dtype == np.float64 else np.float32
        s = adv.astype(acc) * np.where(mask, lp, 0).astype(acc).sum(-1, dtype=acc)
        n = np.maximum(mask.sum(-1), 1).astype(acc)
        a = s / n
        d = np.abs(a).sum(dtype=acc)
        r = np.abs(s).sum(dtype=acc) / d if d > 0 else acc(0)
        if r != 0:
            r = np.nextafter(r, acc(np.inf) if _rng.random() < 0.5 else acc(0))
        return {"sequence_summed": s.astype(lp.dtype), "token_averaged": a.astype(lp.dtype),
                "magnitude_ratio": np.asarray(r).astype(lp.dtype)}
"""


def _check(tmp_path, source: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    args = check_parser().parse_args([f"{path}:normalize", "--framework", "numpy", "--dtypes", "float32",
                                      "--jobs", "1"])
    return run_check(args)


def test_a_correct_but_nondeterministic_function_conforms_and_is_marked(tmp_path):
    (cell,) = _check(tmp_path, SHUFFLED_SUM, "shuffled")
    assert cell.ok, cell.failures
    assert cell.deterministic is False and cell.as_json()["deterministic"] is False
    matrix = render_matrix([cell], ["float32"], {})
    assert " ~" in matrix and "different bits" in matrix


def test_the_builtins_are_deterministic_on_cpu(tmp_path):
    args = check_parser().parse_args(["impls.numpy_impl:sequence_vs_token_normalization", "--framework", "numpy",
                                      "--dtypes", "float32", "--jobs", "1", "--max-examples", "10"])
    (cell,) = run_check(args)
    assert cell.ok and cell.deterministic is True
    assert "identical bits" in render_matrix([cell], ["float32"], {})
