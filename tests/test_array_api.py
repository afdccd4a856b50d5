"""The Array API framework: its snippets rebuild the fuzzer's inputs (empty ones too), `check --framework
array-api` tells a user's correct function from a buggy one, and the one implementation written against the
standard (impls/array_api_impl.py) conforms on NumPy, torch and JAX arrays as well: the porting story."""

from __future__ import annotations

import numpy as np
import pytest

from fuzz import check
from fuzz.report.snippet import SnippetSource, snippet_for
from impls import get_implementation
from impls.array_api_impl import sequence_vs_token_normalization
from impls.frameworks import load_framework
from reference.case import Case

pytest.importorskip("array_api_strict")
pytest.importorskip("array_api_compat")


def _case(shape: tuple[int, int], dtype: str = "float32") -> Case:
    rng = np.random.default_rng(0)
    mask = rng.random(shape) < 0.6
    log_probs = np.where(mask, -rng.integers(0, 8, shape).astype(np.float64), -np.inf)
    return Case(log_probs, rng.integers(-3, 4, shape[0]).astype(np.float64), mask, dtype=dtype)


@pytest.mark.parametrize("shape", [(2, 3), (3, 3), (0, 3), (2, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_snippet_rebuilds_the_fuzzers_inputs(shape, dtype):
    """Empty arrays too: the standard's arrays have no `.reshape` method, so the snippet uses `xp.reshape`."""
    case = _case(shape, dtype)
    adapter = load_framework("array-api")
    snippet = snippet_for(SnippetSource("recorded", "array-api", (), "recorded", None, ()), case, ["something failed"])
    seen = []

    def recorded(*inputs):
        seen.append(inputs)
        return get_implementation("array-api")(*inputs)

    exec(compile(snippet, "<snippet>", "exec"), {"recorded": recorded})  # passes: the function is correct
    for want, got in zip(adapter.materialize(case), seen[0]):
        assert adapter.is_array(got) and adapter.dtype_of(got) == adapter.dtype_of(want)
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(adapter.to_float64(got), adapter.to_float64(want))


def _returns_numpy(token_log_probs, advantages, token_mask):
    outputs = sequence_vs_token_normalization(token_log_probs, advantages, token_mask)
    return {key: np.from_dlpack(value) for key, value in outputs.items()}


def test_check_accepts_the_builtin_and_rejects_a_foreign_return_type():
    report = check(sequence_vs_token_normalization, framework="array-api", max_examples=20, seed=0)
    assert report.ok, str(report)
    assert {cell.dtype for cell in report.cells if cell.applicable} == {"float32", "float64"}  # no halves here
    report = check(_returns_numpy, framework="array-api", max_examples=5, seed=0, fail_fast=True)
    assert not report.ok
    assert "not a array_api_strict.Array" in report.failures[0].message


def test_mixing_libraries_names_the_argument():
    import array_api_strict as xp

    adapter = load_framework("array-api")
    log_probs, advantages = adapter.zeros((2, 3), "float32"), adapter.zeros((2,), "float32")
    with pytest.raises(TypeError, match=r"token_mask must be an array of the library of token_log_probs"):
        sequence_vs_token_normalization(log_probs, advantages, np.ones((2, 3), dtype=bool))
    assert xp.all(sequence_vs_token_normalization(log_probs, advantages, adapter.zeros((2, 3), "bool"))[
        "sequence_summed"] == 0)


# The same function, unchanged, fuzzed as a user's function of each library (every layout NumPy and torch
# have, all four dtypes, gradients through torch autograd and jax.vjp), in this process.
@pytest.mark.long
@pytest.mark.parametrize(("framework", "options"), [
    ("numpy", {}),
    ("torch", {"gradients": True}),
    ("jax", {"gradients": True}),  # in-process: the call's thread must get JAX's x64 scope too
])
def test_the_one_implementation_conforms_on_other_libraries(framework, options):
    pytest.importorskip(framework)
    # On the default device: where outputs land is tests/test_devices.py's concern, not this test's.
    report = check(sequence_vs_token_normalization, framework=framework, max_examples=10, gradient_examples=5,
                   seed=0, devices=["cpu"], **options)
    assert report.ok, str(report) + "\n".join(failure.message for failure in report.failures)
    assert {cell.dtype for cell in report.cells if cell.applicable} == {"float16", "bfloat16", "float32", "float64"}


def test_jax_grad_through_the_array_api_built_ins_with_a_concrete_mask():
    """Under jax.grad (no jit) a traced value's device is None: unknown, not the device "None" that a concrete
    mask's device would differ from."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from impls.array_api_reduction import loss_reduction

    losses, mask = jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([[True, False], [True, True]])
    advantages = jnp.array([1.0, -1.0])
    grad = jax.grad(lambda x: jnp.sum(sequence_vs_token_normalization(x, advantages, mask)["token_averaged"]))(losses)
    assert np.array_equal(np.asarray(grad), [[1.0, 0.0], [-0.5, -0.5]])
    grad = jax.grad(lambda x: loss_reduction(x, mask, mode="token-mean"))(losses)
    assert np.allclose(np.asarray(grad), [[1 / 3, 0.0], [1 / 3, 1 / 3]])


def test_reading_a_strict_dtype_after_numpys_warns_nothing():
    """The judge names every array's dtype through one cache shared by the frameworks: array_api_strict's dtypes
    hash as NumPy's do and warn when compared with them, which printed a warning per cell in the campaign."""
    import warnings

    import array_api_strict

    from impls.frameworks.base import dtype_text

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (np.dtype("float32"), array_api_strict.float32, np.dtype("float64"), array_api_strict.float64):
            assert dtype_text(dtype) == str(dtype)
