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
from tests.conftest import in_process_builtins

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import contextlib, sys
    import numpy as np
    import impls
    from reference.case import Case
    from reference.contracts import get_contract

    name, contract_name = sys.argv[1], sys.argv[2]
    impl = impls.get_implementation(name, contract_name)
    adapter = impl.adapter
    bindings = impl.contract.parameter_menu or ({},)  # every mode and convention a contract has
    calls = 0
    for dtype in impl.dtypes:
        for layout in adapter.layouts:
            for batch, tokens in ((3, 7), (1, 1), (0, 5)):
                rng = np.random.default_rng(batch * 100 + tokens)
                rows = 1 if layout == "expanded" and batch else batch  # stride 0: equal rows
                sizes = {"batch": rows, "tokens": tokens}
                values = {}
                for spec in impl.contract.inputs:
                    shape = tuple(sizes[dim] for dim in spec.dims)
                    drawn = rng.random(shape) < 0.6 if spec.kind == "bool" else -np.round(rng.random(shape) * 8) / 4
                    values[spec.name] = np.repeat(drawn, batch // max(rows, 1), axis=0) if shape else drawn
                parameters = bindings[calls % len(bindings)]
                case = Case(contract=impl.contract.bind(**parameters), dtype=dtype, layout=layout, **values)
                keywords = case.contract.chunked.keywords(case, 1, 1) if case.contract.chunked else {}
                function = impl.function_for(case.contract)
                # the one global switch a library user sets: JAX's float64 exists only under x64
                x64 = contextlib.nullcontext()
                if dtype == "float64" and impl.framework == "jax":
                    import jax
                    x64 = jax.enable_x64(True)
                with x64:
                    inputs = adapter.materialize(case, requires_grad=impl.differentiable)
                    out = function(*inputs, **keywords)
                    if impl.differentiable:
                        named = case.contract.outputs_of(out)
                        cotangents = {key: np.ones(np.shape(adapter.to_float64(value))) for key, value in named.items()}
                        vjp = adapter.vjp(function, inputs, cotangents, case.contract, keywords or None)
                        assert all(g is not None for g in vjp.gradients.values()) and not vjp.detached
                calls += 1
    print("calls", calls)
""")


@pytest.mark.long
@pytest.mark.parametrize(("contract", "name"), in_process_builtins())
def test_a_builtin_runs_every_dtype_layout_and_shape_in_one_process(contract, name):
    try:
        impl = impls.get_implementation(name, contract)
    except RuntimeError as error:
        pytest.skip(str(error))
    result = subprocess.run([sys.executable, "-c", SCRIPT, name, contract], capture_output=True, text=True,
                            timeout=900, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"calls {len(impl.dtypes) * len(impl.adapter.layouts) * 3}" in result.stdout
