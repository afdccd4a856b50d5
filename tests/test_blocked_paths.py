"""The fast implementations work in row blocks (and NumPy in threads) sized for cache; the fuzzer's small
cases fit in one block. Force tiny blocks so the multi-block, overlapping-last-block and threaded paths
are fuzzed too."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import impls
from fuzz.campaign import check_example
from fuzz.cli import subject_for
from fuzz.strategies import draw_case
from impls.dtypes import DTYPE_NAMES

TINY_BLOCKS = {
    "numpy": [("impls.numpy_impl", "BLOCK_ELEMENTS", 4), ("impls.numpy_impl", "THREADED_ELEMENTS", 1)],
    "torch-eager": [("impls.torch_eager", "CHUNK_ELEMENTS", 7)],
    "jax-jit": [("impls.jax_jit", "BLOCK_ELEMENTS", 13)],
}


@pytest.mark.parametrize("name", list(TINY_BLOCKS))
def test_multi_block_paths_conform(name, monkeypatch):
    import importlib

    impl = impls.get_implementation(name)
    for module, attribute, value in TINY_BLOCKS[name]:
        monkeypatch.setattr(importlib.import_module(module), attribute, value)
    if name == "jax-jit":
        import jax

        jax.clear_caches()  # block sizes are read when tracing: drop traces made with the real ones

    @settings(max_examples=15, deadline=None)
    @given(data=st.data())
    def conforms(data):
        case = draw_case(lambda s, label: data.draw(s, label=label), dtypes=DTYPE_NAMES,
                         layouts=impl.adapter.layouts)
        verdict = check_example(subject_for(impl), case, None)
        assert verdict.ok, "\n".join(verdict.failures) + (verdict.traceback or "")

    try:
        conforms()
    finally:
        if name == "jax-jit":
            import jax

            jax.clear_caches()  # and drop the tiny-block traces before other tests run
