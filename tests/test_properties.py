"""The fuzzer's properties for every available implementation, device and dtype, as pytest tests
(ids like `torch-compile-cpu-float16`), forward and, for the differentiable ones, gradients.
Profiles: --hypothesis-profile ci|dev|thorough or FUZZ_PROFILE."""

import pytest
from hypothesis import given, target
from hypothesis import strategies as st

import impls
from fuzz.judge.draws import choice, draw_case
from fuzz.judge.example import check_example
from fuzz.judge.gradients import gradient_example
from fuzz.run.subjects import subject_for
from reference.dtypes import DTYPE_NAMES
from tests.conftest import implementation_devices


def _implementation(name: str) -> impls.Implementation | None:
    try:
        return impls.get_implementation(name)
    except RuntimeError:  # unavailable here: implementation_devices() already marks it skipped
        return None


def _params(differentiable_only: bool) -> list:
    """Every (implementation, device, dtype), a dtype the registry does not list for it skipped (the Array API
    has no float16 or bfloat16); with `differentiable_only`, only the implementations the registry says have
    gradients."""
    params = []
    for p in implementation_devices():
        impl = _implementation(p.values[0])
        if differentiable_only and impl is not None and not impl.differentiable:
            continue
        for dtype in DTYPE_NAMES:
            marks = list(p.marks)
            if impl is not None and dtype not in impl.dtypes:
                marks.append(pytest.mark.skip(reason=f"{impl.name} has no {dtype}"))
            params.append(pytest.param(*p.values, dtype, id=f"{p.id}-{dtype}", marks=marks))
    return params


PARAMS = _params(differentiable_only=False)
DIFFERENTIABLE_PARAMS = _params(differentiable_only=True)


def _case(impl, device: str, dtype: str, data):
    return draw_case(lambda s, label: data.draw(s, label=label), dtypes=[dtype],
                     layouts=impl.adapter.layouts, devices=[device])


def _assert_conforms(verdict) -> None:
    for label, ratio in verdict.error_ratios.items():
        target(min(ratio, 1e6), label=label)  # climb toward the worst err/tol
    assert verdict.ok, "\n".join(map(str, verdict.failures)) + (verdict.traceback or "")


@pytest.mark.parametrize(("name", "device", "dtype"), PARAMS)
@given(data=st.data())
def test_conforms_to_the_reference(name, device, dtype, data):
    impl = impls.get_implementation(name)
    case = _case(impl, device, dtype, data)
    relation = data.draw(choice(tuple(r.name for r in impl.contract.relations)), label="metamorphic relation")
    _assert_conforms(check_example(subject_for(impl), case, relation))


@pytest.mark.parametrize(("name", "device", "dtype"), DIFFERENTIABLE_PARAMS)
@given(data=st.data())
def test_gradients_match_the_exact_vjp(name, device, dtype, data):
    impl = impls.get_implementation(name)
    _assert_conforms(gradient_example(subject_for(impl), _case(impl, device, dtype, data), data))
