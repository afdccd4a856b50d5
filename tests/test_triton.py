"""torch-triton: the README's examples, every torch layout, -inf/NaN padding, empty shapes and gradients against the
exact VJP in all four dtypes, judged by reference/tolerance.py as is; on CPU through Triton's interpreter (which the
implementation picks itself), on CUDA compiled where there is one. The property tests fuzz it too."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import impls  # noqa: E402
from fuzz.judge.forward import check_forward  # noqa: E402
from fuzz.judge.gradients import check_gradients  # noqa: E402
from fuzz.run.subjects import subject_for  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.dtypes import DTYPE_NAMES  # noqa: E402
from reference.magnitude import OUTPUT_KEYS, vjp  # noqa: E402

NAME = "torch-triton"
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                    reason="no cuda device for torch-triton here"))]
LAYOUTS = impls.get_implementation(NAME).adapter.layouts if NAME in impls.available_implementations() else ()
EXAMPLES = [  # the README's: (log-probs, advantages, mask) -> (summed, averaged, ratio)
    (([[-1, -2], [-3, -4]], [2, -1], [[1, 1], [1, 1]]), ([-6, 7], [-3, 3.5], 2)),
    (([[-2, -5, -8]], [3], [[1, 0, 0]]), ([-6], [-6], 1)),
    (([[-1, -2], [-3, -4]], [2, -1], [[0, 0], [0, 0]]), ([0, 0], [0, 0], 0)),
]
COTANGENTS = ("all", "ratio only")


def _impl() -> impls.Implementation:
    return impls.get_implementation(NAME)


def _equal_rows(lp: np.ndarray, adv: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The expanded (stride-0) layout needs rows equal along the batch: repeat the first."""
    return np.repeat(lp[:1], len(lp), 0), np.repeat(adv[:1], len(adv)), np.repeat(mask[:1], len(mask), 0)


def _random_case(seed: int, dtype: str, layout: str, device: str, padding: float = np.nan,
                 shape: tuple[int, int] = (5, 7)) -> Case:
    """Small exact values (multiples of 1/8, never 0, so no |x| kink), a ragged mask with a fully masked row."""
    rng = np.random.default_rng(seed)
    lp = -(rng.integers(1, 64, shape) / 8.0)
    adv = rng.integers(-16, 17, shape[0]) / 8.0
    adv[adv == 0] = 0.5
    mask = rng.random(shape) < 0.6
    mask[min(1, shape[0] - 1)] = False
    if layout == "expanded":
        lp, adv, mask = _equal_rows(lp, adv, mask)
    return Case(np.where(mask, lp, padding), adv, mask, dtype=dtype, layout=layout, device=device)


def _cotangents(kind: str, case: Case) -> dict[str, np.ndarray]:
    batch = case.shape[0]
    if kind == "ratio only":
        return {"sequence_summed": np.zeros(batch), "token_averaged": np.zeros(batch), "magnitude_ratio": np.array(1.5)}
    rng = np.random.default_rng(batch)
    return {"sequence_summed": rng.normal(size=batch), "token_averaged": rng.normal(size=batch),
            "magnitude_ratio": np.array(-0.75)}


def _assert_gradients_conform(case: Case, kind: str) -> None:
    cotangents = _cotangents(kind, case)
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents)
    verdict = check_gradients(subject_for(_impl()), case, cotangents, exact)
    assert verdict.ok, "\n".join(verdict.failures) + (verdict.traceback or "")


def test_listed_wherever_triton_imports():
    impl = _impl()
    assert NAME in impls.available_implementations()
    assert (impl.framework, impl.differentiable, impl.dtypes) == ("torch", True, DTYPE_NAMES)
    assert impl.devices == (("cpu", "cuda") if torch.cuda.is_available() else ("cpu",))
    assert impl.benchmarked_devices == tuple(d for d in impl.devices if d == "cuda")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_readme_examples_exactly_in_every_layout(device, dtype):
    impl = _impl()
    for layout in LAYOUTS:
        for (lp, adv, mask), (summed, averaged, ratio) in EXAMPLES:
            lp, adv, mask = np.array(lp, float), np.array(adv, float), np.array(mask, bool)
            if layout == "expanded":  # equal rows: the ratio is the first row's count (0 when it is empty)
                lp, adv, mask = _equal_rows(lp, adv, mask)
                summed, averaged = [summed[0]] * len(lp), [averaged[0]] * len(lp)
                ratio = int(mask[0].sum()) if summed[0] else 0
            case = Case(lp, adv, mask, dtype=dtype, layout=layout, device=device)
            with impl.scope(case):
                out = impl(*impl.adapter.materialize(case))
            for key, want in zip(OUTPUT_KEYS, (summed, averaged, ratio)):
                assert str(out[key].dtype) == f"torch.{dtype}" and out[key].device.type == device
                got = impl.adapter.to_float64(out[key])
                assert np.array_equal(got, np.asarray(want, float)), (layout, key, got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding", [-np.inf, np.nan])
def test_padding_never_enters_forward_or_backward(device, padding):
    for dtype in DTYPE_NAMES:
        for layout in LAYOUTS:
            case = _random_case(1, dtype, layout, device, padding)
            verdict = check_forward(_impl().function, _impl().adapter, case)
            assert verdict.ok, (dtype, layout, verdict.failures, verdict.traceback)
            _assert_gradients_conform(case, "all")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("batch", "tokens"), [(0, 5), (0, 0), (3, 0), (1, 1), (4, 3)])
def test_empty_and_fully_masked_shapes_forward_and_backward(device, batch, tokens):
    for dtype in DTYPE_NAMES:
        for selected in (True, False):  # False: every row fully masked
            mask = np.full((batch, tokens), selected)
            case = Case(np.where(mask, -1.0, -np.inf), np.full(batch, 2.0), mask, dtype=dtype, device=device)
            verdict = check_forward(_impl().function, _impl().adapter, case)
            assert verdict.ok, (dtype, selected, verdict.failures, verdict.traceback)
            _assert_gradients_conform(case, "all")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("kind", COTANGENTS)
def test_gradients_match_the_exact_vjp_in_every_layout(device, dtype, kind):
    for layout in LAYOUTS:
        for seed in range(3):
            _assert_gradients_conform(_random_case(seed, dtype, layout, device, shape=(4 + seed, 3 + 5 * seed)), kind)


def test_tiles_of_several_programs_and_blocks_conform(monkeypatch):
    """The fuzzer's small cases fit in one interpreter program and one block: force 2x2 tiles."""
    from impls import torch_triton

    monkeypatch.setattr(torch_triton, "INTERPRETER_BLOCK_TOKENS", 2)
    monkeypatch.setattr(torch_triton, "INTERPRETER_TILE_ELEMENTS", 4)
    for dtype in DTYPE_NAMES:
        for layout in LAYOUTS:
            case = _random_case(7, dtype, layout, "cpu", shape=(5, 7))
            verdict = check_forward(_impl().function, _impl().adapter, case)
            assert verdict.ok, (dtype, layout, verdict.failures)
            _assert_gradients_conform(case, "all")


def test_cpu_kernels_are_interpreted_without_the_environment_variable():
    import triton
    from triton.runtime.interpreter import InterpretedFunction

    from impls import torch_triton

    before = os.environ.get("TRITON_INTERPRET")
    forward, backward = torch_triton._kernels(True)
    assert isinstance(forward, InterpretedFunction) and isinstance(backward, InterpretedFunction)
    if before is None:  # the user's setting (if any) decides the CUDA kernels; we never change it
        assert not isinstance(torch_triton._kernels(False)[0], InterpretedFunction)
        assert not triton.knobs.runtime.interpret
    assert os.environ.get("TRITON_INTERPRET") == before


def test_bfloat16_gradients_round_like_torch():
    """The backward writes bfloat16 as integer-rounded bits (the interpreter's bf16 casts are wrong): ties to
    even, large and small magnitudes and both signs must equal torch's own float32 -> bfloat16 conversion."""
    from impls.torch_triton import log_probs_gradient

    ties = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-8 + 2**-16, 0.0, -0.0]
    values = torch.tensor(ties + torch.randn(250, generator=torch.Generator().manual_seed(0)).mul(1e4).tolist()
                          + [3e38, -3e38, 1e-30], dtype=torch.float32)
    mask = torch.ones(len(values), 3, dtype=torch.bool)
    mask[:, 1] = False
    got = log_probs_gradient(values, mask.view(torch.uint8), torch.bfloat16)
    want = torch.where(mask, values[:, None], 0.0).to(torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_no_cpu_benchmark_row():
    from bench.plan import make_plan, targets

    found, _ = targets(make_plan(NAME, "cpu", "float32", "small"))
    assert found == []


def test_interpreter_compiles_nothing():
    from impls.torch_triton import compiled_count

    case = _random_case(0, "float32", "contiguous", "cpu")
    _impl()(*_impl().adapter.materialize(case))
    assert compiled_count() == 0 or torch.cuda.is_available()
