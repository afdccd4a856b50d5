"""The contract, implementation by implementation: examples, dtypes, devices, layouts, inputs, edges, errors."""

from __future__ import annotations

import numpy as np
import pytest

import impls
from fuzz.judge.outputs import modified_inputs
from reference.case import Case
from reference.dtypes import DTYPE_NAMES
from reference.magnitude import OUTPUT_KEYS, reference
from tests.conftest import implementation_devices

EXAMPLES = {
    "two rows, all selected": ([[-1, -2], [-3, -4]], [2, -1], [[1, 1], [1, 1]]),
    "one token of three": ([[-2, -5, -8]], [3], [[1, 0, 0]]),
    "all masked": ([[-1, -2], [-3, -4]], [2, -1], [[0, 0], [0, 0]]),
}
EXPECTED = {
    "two rows, all selected": ([-6, 7], [-3, 3.5], 2),
    "one token of three": ([-6], [-6], 1),
    "all masked": ([0, 0], [0, 0], 0),
}


def _case(example: str, dtype: str, layout: str, device: str) -> Case:
    lp, adv, mask = (np.array(x, dtype=float) for x in EXAMPLES[example])
    if layout == "expanded":  # stride 0 needs equal rows: repeat the first row
        lp, adv, mask = np.repeat(lp[:1], len(lp), 0), np.repeat(adv[:1], len(adv)), np.repeat(mask[:1], len(mask), 0)
    return Case(lp, adv, mask.astype(bool), dtype=dtype, layout=layout, device=device)


def _outputs(name: str, case: Case) -> dict[str, np.ndarray]:
    impl = impls.get_implementation(name)
    with impl.scope(case):
        out = impl(*impl.adapter.materialize(case))
    for key in OUTPUT_KEYS:
        assert impl.adapter.is_array(out[key]), f"{key} is {type(out[key]).__name__}"
        assert impl.adapter.dtype_of(out[key]) == case.dtype
        assert impl.adapter.device_of(out[key]) == case.device
    return {key: impl.adapter.to_float64(out[key]) for key in OUTPUT_KEYS}


def test_all_six_builtins_are_available_here():
    assert impls.available_implementations() == ["torch-eager", "torch-compile", "torch-triton", "jax-jit", "numpy",
                                                 "array-api"]
    assert impls.unavailable_implementations() == {}
    impl = impls.get_implementation("numpy")
    assert (impl.name, impl.framework, impl.devices, impl.dtypes) == ("numpy", "numpy", ("cpu",), DTYPE_NAMES)
    impl = impls.get_implementation("array-api")  # the standard has no float16 or bfloat16, and no autograd
    assert (impl.name, impl.framework, impl.devices, impl.dtypes, impl.differentiable) == (
        "array-api", "array-api", ("cpu",), ("float32", "float64"), False)


@pytest.mark.parametrize(("name", "device"), implementation_devices())
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_examples_exactly_in_every_layout(name, device, dtype):
    impl = impls.get_implementation(name)
    if dtype not in impl.dtypes:
        pytest.skip(f"{name} has no {dtype}")
    for layout in impl.adapter.layouts:
        for example in EXAMPLES:
            case = _case(example, dtype, layout, device)
            got = _outputs(name, case)
            if layout == "expanded":
                want = reference(case.token_log_probs, case.advantages, case.token_mask).outputs()
            else:
                summed, averaged, ratio = EXPECTED[example]
                want = {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
            for key in OUTPUT_KEYS:
                assert np.array_equal(got[key], np.asarray(want[key], dtype=float)), (layout, example, key, got)


@pytest.mark.parametrize(("name", "device"), implementation_devices())
@pytest.mark.parametrize("padding", [-np.inf, np.nan, 1e4])
def test_masked_positions_are_ignored_whatever_they_hold(name, device, padding):
    case = Case(np.array([[-1.0, padding], [padding, padding]]), np.array([2.0, 3.0]),
                np.array([[True, False], [False, False]]), dtype="float32", device=device)
    got = _outputs(name, case)
    assert got["sequence_summed"].tolist() == [-2.0, 0.0]
    assert got["token_averaged"].tolist() == [-2.0, 0.0]
    assert float(got["magnitude_ratio"]) == 1.0


@pytest.mark.parametrize(("name", "device"), implementation_devices())
@pytest.mark.parametrize(("batch", "tokens"), [(0, 5), (0, 0), (3, 0), (1, 1)])
def test_degenerate_shapes(name, device, batch, tokens):
    case = Case(np.full((batch, tokens), -1.0), np.full(batch, 2.0), np.ones((batch, tokens), bool), device=device)
    got = _outputs(name, case)
    assert got["sequence_summed"].shape == (batch,) and got["magnitude_ratio"].shape == ()
    assert got["sequence_summed"].tolist() == [-2.0 * tokens] * batch
    assert float(got["magnitude_ratio"]) == (float(tokens) if batch and tokens else 0.0)


@pytest.mark.parametrize(("name", "device"), implementation_devices())
def test_inputs_are_not_modified(name, device):
    impl = impls.get_implementation(name)
    rng = np.random.default_rng(0)
    for layout in impl.adapter.layouts:
        lp = np.round(-rng.random((4, 6)) * 64) / 8
        mask = rng.random((4, 6)) < 0.5
        adv = np.round(rng.normal(size=4) * 8) / 8
        if layout == "expanded":
            lp, mask, adv = np.repeat(lp[:1], 4, 0), np.repeat(mask[:1], 4, 0), np.full(4, adv[0])
        case = Case(np.where(mask, lp, -np.inf), adv, mask, layout=layout, device=device)
        with impl.scope(case):
            inputs = impl.adapter.materialize(case)
            snapshot = impl.adapter.snapshot(inputs)
            impl(*inputs)
        assert modified_inputs(impl.adapter, case, inputs, snapshot).failures == []
        if snapshot.write_counts is not None:  # torch's version counters move on any write, even of equal values
            assert impl.adapter.snapshot(inputs).write_counts == snapshot.write_counts


def _bad_inputs(adapter):
    """(args, exception, message) triples in the framework's own arrays (the error inputs, as OpInfo has). The
    expected kind is the adapter's array type, which an implementation accepting more may name more after."""
    make, kind = adapter.zeros, adapter.array_type
    f32, f64, b = "float32", "float64", "bool"
    return [
        ((make((3, 5), f32), make((3,), f32), make((3, 5), f32)), TypeError,
         r"token_mask must be a bool (tensor|array) of shape \(3, 5\), got float32 of shape \(3, 5\)"),
        ((make((3, 5), f32), make((3,), f32), make((5, 3), b)), ValueError,
         r"token_mask must be a bool (tensor|array) of shape \(3, 5\), got bool of shape \(5, 3\)"),
        ((make((3, 5), f32), make((3,), f64), make((3, 5), b)), TypeError,
         r"advantages must be a float32 (tensor|array) of shape \(3,\), got float64 of shape \(3,\)"),
        ((make((3, 5), f32), make((4,), f32), make((3, 5), b)), ValueError,
         r"advantages must be a float32 (tensor|array) of shape \(3,\), got float32 of shape \(4,\)"),
        ((make((3, 5), f32), make((3, 1), f32), make((3, 5), b)), ValueError, r"advantages must be"),
        ((make((15,), f32), make((3,), f32), make((15,), b)), ValueError,
         r"token_log_probs must be a 2-D \(batch, tokens\)"),
        ((make((3, 5), b), make((3,), b), make((3, 5), b)), TypeError,
         r"token_log_probs must be a floating (tensor|array) of dtype .*float32.*, got bool"),
        (([[0.0] * 5] * 3, make((3,), f32), make((3, 5), b)), TypeError, f"token_log_probs must be a {kind}"),
        ((make((3, 5), f32), [0.0] * 3, make((3, 5), b)), TypeError, f"advantages must be a {kind}"),
        ((make((3, 5), f32), make((3,), f32), None), TypeError,
         f"token_mask must be a {kind}[^,]*, got builtins.NoneType"),
    ]


@pytest.mark.parametrize("name", impls.BUILTIN_NAMES)
def test_bad_input_gets_a_clear_error(name):
    impl = impls.get_implementation(name)
    float64 = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool), dtype="float64")
    with impl.scope(float64):  # float64 arrays exist only in a framework's 64-bit mode, where it has one
        for args, error, message in _bad_inputs(impl.adapter):
            with pytest.raises(error, match=message):
                impl(*args)


def test_device_mismatch_is_named():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device to put two inputs on different devices")
    impl = impls.get_implementation("torch-eager")
    with pytest.raises(ValueError, match=r"advantages must be on the device of token_log_probs \(cpu\), got cuda:0"):
        impl(torch.zeros(2, 3), torch.zeros(2, device="cuda"), torch.ones(2, 3, dtype=torch.bool))


def test_any_mapping_of_the_outputs_is_a_result_and_nothing_else_is():
    """A read-only mapping (or any other Mapping) with the outputs' names conforms as a dict does; a list of the
    same arrays is no mapping, and the failure says what the contract expects."""
    import types

    from fuzz import check_case

    builtin = impls.get_implementation("numpy", "magnitude").function
    case = Case([[-1.0, -2.0], [-3.0, -4.0]], [2.0, -1.0], [[True, True], [True, False]])
    assert check_case(lambda *a: types.MappingProxyType(builtin(*a)), case, "numpy") == []
    failures = check_case(lambda *a: list(builtin(*a).values()), case, "numpy")
    assert failures and "returned list, expected" in failures[0], failures
