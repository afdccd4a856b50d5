"""Every built-in as a library: called directly, the way a trainer calls the code it copied, with every dtype,
layout and a few shapes, forward and backward, under the frameworks' default settings (no fuzzer scope: dynamo's
recompile limit as shipped, JAX's x64 on only for float64). One fresh process per implementation calls its built-in
of every contract, one contract after the other, as a trainer that logs the magnitude diagnostic and computes its
loss in one process does: the contracts' compiled built-ins share their compiled pass (impls/torch_compile.py), so
one process is also where their compiles add up against dynamo's recompile limit."""

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


    def calls_of(name, contract_name):
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
                            cotangents = {key: np.ones(np.shape(adapter.to_float64(value)))
                                          for key, value in named.items()}
                            vjp = adapter.vjp(function, inputs, cotangents, case.contract, keywords or None)
                            assert all(g is not None for g in vjp.gradients.values()) and not vjp.detached
                    calls += 1
        return calls


    for contract_name in sys.argv[2:]:
        print(contract_name, "calls", calls_of(sys.argv[1], contract_name), flush=True)
""")


def _contracts_by_builtin() -> dict[str, list[str]]:
    """Every in-process built-in's name and the contracts it has a built-in of (conftest.in_process_builtins)."""
    contracts: dict[str, list[str]] = {}
    for contract, name in in_process_builtins():
        contracts.setdefault(name, []).append(contract)
    return contracts


CONTRACTS_BY_BUILTIN = _contracts_by_builtin()


@pytest.mark.long
@pytest.mark.parametrize(("name", "contracts"), list(CONTRACTS_BY_BUILTIN.items()), ids=list(CONTRACTS_BY_BUILTIN))
def test_a_builtin_runs_every_contract_dtype_layout_and_shape_in_one_process(name, contracts):
    implementations = []
    for contract in contracts:
        try:
            implementations.append(impls.get_implementation(name, contract))
        except RuntimeError as error:
            pytest.skip(str(error))
    result = subprocess.run([sys.executable, "-c", SCRIPT, name, *contracts], capture_output=True, text=True,
                            timeout=900, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    for contract, impl in zip(contracts, implementations):
        assert f"{contract} calls {len(impl.dtypes) * len(impl.adapter.layouts) * 3}" in result.stdout
