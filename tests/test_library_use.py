"""Every built-in as a library: called directly, the way a trainer calls the code it copied, with every dtype,
layout and a few shapes in one fresh process, forward and backward, under the frameworks' default settings
(no fuzzer scope: dynamo's recompile limit as shipped, JAX's x64 on only for float64)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import impls

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import contextlib, sys
    import numpy as np
    import impls
    from reference.case import Case

    impl = impls.get_implementation(sys.argv[1])
    adapter = impl.adapter
    calls = 0
    for dtype in impl.dtypes:
        for layout in adapter.layouts:
            for batch, tokens in ((3, 7), (1, 1), (0, 5)):
                rng = np.random.default_rng(batch * 100 + tokens)
                rows = 1 if layout == "expanded" and batch else batch
                lp = -np.repeat(np.round(rng.random((rows, tokens)) * 8) / 4, batch // max(rows, 1), axis=0)
                adv = np.full(batch, -0.5)
                case = Case(lp, adv, lp < -0.5, dtype=dtype, layout=layout)
                # the one global switch a library user sets: JAX's float64 exists only under x64
                x64 = contextlib.nullcontext()
                if dtype == "float64" and impl.framework == "jax":
                    import jax
                    x64 = jax.enable_x64(True)
                with x64:
                    inputs = adapter.materialize(case, requires_grad=impl.differentiable)
                    out = impl(*inputs)
                    if impl.differentiable:
                        cotangents = {key: np.ones(np.shape(adapter.to_float64(value))) for key, value in out.items()}
                        vjp = adapter.vjp(impl.function, inputs, cotangents, impl.contract)
                        assert all(g is not None for g in vjp.gradients.values()) and not vjp.detached
                calls += 1
    print("calls", calls)
""")


@pytest.mark.long
@pytest.mark.parametrize("name", impls.BUILTIN_NAMES)
def test_a_builtin_runs_every_dtype_layout_and_shape_in_one_process(name):
    try:
        impl = impls.get_implementation(name)
    except RuntimeError as error:
        pytest.skip(str(error))
    result = subprocess.run([sys.executable, "-c", SCRIPT, name], capture_output=True, text=True, timeout=900,
                            cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"calls {len(impl.dtypes) * len(impl.adapter.layouts) * 3}" in result.stdout
