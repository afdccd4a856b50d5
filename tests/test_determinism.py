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


SECOND_CALL_RAISES = """
    import numpy as np

    from impls.numpy_impl import sequence_vs_token_normalization

    _seen = {}  # id -> the array itself, kept alive: a freed array's id is reused by the next one made

    def normalize(lp, adv, mask):
        # Right on its first call on an array, wrong on a second call on the same one (state kept between calls).
        if _seen.get(id(lp)) is lp:
            raise RuntimeError("called twice on the same inputs")
        _seen[id(lp)] = lp
        return sequence_vs_token_normalization(lp, adv, mask)
"""

WRONG_ON_LONG_ROWS = """
    import numpy as np

    from impls.numpy_impl import sequence_vs_token_normalization

    calls = []  # (the log-probs array itself, whether this call's ratio is wrong)

    def normalize(lp, adv, mask):
        out = sequence_vs_token_normalization(lp, adv, mask)
        wrong = lp.shape[1] >= 300 and bool(mask.any())  # the bug: a wrong ratio on long rows
        if wrong:
            out["magnitude_ratio"] = out["magnitude_ratio"] + np.asarray(1, lp.dtype)
        calls.append((lp, wrong))
        return out
"""


def test_a_failure_of_the_second_call_alone_is_reported_with_its_case(tmp_path):
    """Only the determinism call fails: the shrinker keeps making it (without it the failing example would pass
    when replayed, and Hypothesis would call the run flaky)."""
    (cell,) = _check(tmp_path, SECOND_CALL_RAISES, "second_call")
    assert not cell.ok and cell.bugs, cell.failures
    assert any("second call on the same inputs: " in failure and "called twice" in failure
               for failure in cell.failures), cell.failures


def test_after_a_failure_the_examples_make_no_determinism_call(tmp_path):
    """The shrinker's many tries of a failing cell cost one call each, plus the relation's, not two."""
    import importlib.util

    path = tmp_path / "long_rows.py"
    path.write_text(textwrap.dedent(WRONG_ON_LONG_ROWS))
    spec = importlib.util.spec_from_file_location("long_rows", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from fuzz import check

    report = check(module.normalize, framework="numpy", dtypes=["float32"], seed=3)
    assert not report.ok
    first_wrong = next(index for index, (_, wrong) in enumerate(module.calls) if wrong)
    repeats = [index for index in range(1, len(module.calls)) if module.calls[index][0] is module.calls[index - 1][0]]
    assert any(index < first_wrong for index in repeats)  # before it, every passing example calls twice
    assert not [index for index in repeats if index > first_wrong], (first_wrong, len(module.calls), repeats)
