"""A failing sharded example as a script that launches the ranks itself: torch.multiprocessing.spawn on
gloo (127.0.0.1), or a shard_map (or a plain jit of sharded inputs) over host-platform CPU devices. Save it as
a file and run it (spawned ranks import the main module, so it cannot be piped to `python -`); it exits
non-zero while the bug is there. The engines (torch_ranks.py, jax_mesh.py, jax_plain.py) call these.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzz.sharded.judge import summed_over_replicas
from fuzz.sharded.split import Padded, Split, pad_cotangents, pad_for_shard_map
from reference.case import Case
from reference.exact import exact_results


def _literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=np.float64).tolist())


def _bool_literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=bool).tolist())


def _header(subject: Any, case: Case, failures: list[str], how: str) -> list[str]:
    lines = [
        f"# Counterexample found by `python -m fuzz check --sharded`: {how}.",
        "# Save as a file and run it (the ranks import this file); it fails while the bug is there.",
        *[f"# FAILED: {failure}" for failure in failures],
        *([f"# contract: {case.contract.label}"] if case.contract.bound else []),
        f"# dtype {case.dtype}, shape {case.shape}",
        "from math import inf, nan",
        "import numpy as np",
        *subject.import_lines,
        "",
    ]
    for spec in case.contract.inputs:
        value = case.values[spec.name]
        literal = _bool_literal(value) + ", dtype=bool" if spec.kind == "bool" else _literal(value)
        lines.append(f"{spec.name.upper()} = np.array({literal}).reshape{tuple(value.shape)!r}")
    return lines


def _expected_lines(subject: Any, case: Case, cotangents: dict[str, np.ndarray] | None,
                    exact_cotangents: dict[str, np.ndarray] | None, padded: Padded | None = None) -> list[str]:
    """Exact values and tolerances of `case`; with `padded`, placed where its rows and tokens went (padded
    positions: exactly 0, tolerance 0)."""
    contract, expected = case.contract, exact_results(case)
    tol = contract.tolerance(expected, case.dtype, subject.precision)

    def place(values: np.ndarray, dims: tuple[str, ...]) -> np.ndarray:
        return values if padded is None else padded.place(np.asarray(values, dtype=np.float64), dims)

    lines = ["# exact float64 results of the whole batch, and the tolerance the suite's error model allows"]
    for spec in contract.outputs:
        want = place(expected.outputs()[spec.name], spec.dims)
        lines += [f"EXPECTED_{spec.name.upper()} = np.array({_literal(want)})",
                  f"TOLERANCE_{spec.name.upper()} = np.array({_literal(place(tol[spec.name], spec.dims))})"]
    if cotangents is not None and exact_cotangents is not None:
        exact = contract.vjp(case, exact_cotangents, expected)
        tolerances = contract.gradient_tolerance(exact, exact_cotangents, case.dtype, subject.precision)
        given = cotangents if padded is None else pad_cotangents(padded, cotangents)
        lines += [f"COTANGENT_{key.upper()} = np.array({_literal(value)})" for key, value in given.items()]
        lines.append("# the exact VJP (cotangents summed over replicas where each replica receives one)")
        for spec in contract.differentiable_inputs:
            shape = tuple(value for value in (padded.case if padded else case).values[spec.name].shape)
            lines += [f"EXPECTED_D_{spec.name.upper()} = np.array("
                      f"{_literal(place(exact.inputs()[spec.name], spec.dims))}).reshape{shape!r}",
                      f"TOLERANCE_D_{spec.name.upper()} = np.array("
                      f"{_literal(place(tolerances[spec.name][0], spec.dims))}).reshape{shape!r}"]
    return lines


CHECK_FUNCTION = '''
def check(name, got, want, tol, problems):
    if got is None:
        problems.append(f"{name}: no gradient (the outputs do not reach this input)")
        return
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(want))
    print(f"{name}: got {got.tolist()}, expected {want.tolist()}")
    if not np.isfinite(got).all() or (np.abs(got - want) > tol).any():
        problems.append(f"{name}: got {got.tolist()}, expected {want.tolist()} +- {np.asarray(tol).tolist()}")
'''


def _as_outputs(contract: Any, result: str) -> str:
    return result if contract.returns_mapping else f"{{{contract.outputs[0].name!r}: {result}}}"


def torch_ranks_snippet(subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
                        failures: list[str]) -> str:
    contract = case.contract
    exact_cotangents = summed_over_replicas(case, cotangents, split) if cotangents is not None else None
    lines = _header(subject, case, failures, f"torch.distributed, mesh {split.data}x{split.sequence} "
                    "(data x sequence), gloo ranks on 127.0.0.1")
    allowed = [f"torch.{dtype}" for dtype in contract.output_dtypes(case.dtype)]
    lines += [
        "import os, socket",
        "import torch",
        "import torch.distributed as dist",
        "import torch.multiprocessing",
        "",
        f"DATA, SEQUENCE = {split.data}, {split.sequence}",
        "# rank d * SEQUENCE + q holds rows ROW_CUTS[d]:ROW_CUTS[d + 1], tokens TOKEN_CUTS[q]:TOKEN_CUTS[q + 1]",
        f"ROW_CUTS, TOKEN_CUTS = {list(split.row_cuts)!r}, {list(split.token_cuts)!r}",
        f"DTYPE = torch.{case.dtype}",
        *_expected_lines(subject, case, cotangents, exact_cotangents),
        CHECK_FUNCTION,
        "def run_rank(rank, port):",
        "    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,",
        "                            world_size=DATA * SEQUENCE)",
        "    data_groups = [dist.new_group([d * SEQUENCE + q for d in range(DATA)]) for q in range(SEQUENCE)]",
        "    sequence_groups = [dist.new_group([d * SEQUENCE + q for q in range(SEQUENCE)]) for d in range(DATA)]",
        "    d, q = divmod(rank, SEQUENCE)",
        "    rows, tokens = slice(ROW_CUTS[d], ROW_CUTS[d + 1]), slice(TOKEN_CUTS[q], TOKEN_CUTS[q + 1])",
        "    block = {'data': rows, 'sequence': tokens}",
    ]
    for spec in contract.inputs:
        index = ", ".join(f"block[{axis!r}]" for axis in spec.mesh)
        dtype = "torch.bool" if spec.kind == "bool" else "DTYPE"
        lines.append(f"    {spec.name} = torch.tensor({spec.name.upper()}[{index}], dtype={dtype})")
    arguments = ", ".join(contract.input_names)
    call = f"{subject.function_name}({arguments}, data_group=data_groups[q], sequence_group=sequence_groups[d])"
    lines.append("    problems = []")
    if cotangents is None:
        lines += [
            f"    out = {_as_outputs(contract, call)}",
        ]
        for spec in contract.outputs:
            rows = "[rows]" if spec.dims else ""
            lines += [
                f"    got = out[{spec.name!r}]",
                f"    if not isinstance(got, torch.Tensor) or got.dtype not in ({', '.join(allowed)},):",
                f"        problems.append(f'{spec.name}: a {{type(got).__name__}} of dtype "
                "{getattr(got, \"dtype\", None)}')",
                f"    check(f'rank {{rank}} {spec.name}', got.detach().double().numpy(), "
                f"EXPECTED_{spec.name.upper()}{rows}, TOLERANCE_{spec.name.upper()}{rows}, problems)",
            ]
    else:
        differentiable = [spec.name for spec in contract.differentiable_inputs]
        lines += [*[f"    {name}.requires_grad_(True)" for name in differentiable],
                  f"    out = {_as_outputs(contract, call)}",
                  "    # every replica receives the cotangent of what it returns",
                  "    cotangents = {"]
        lines += [f"        {spec.name!r}: COTANGENT_{spec.name.upper()}{'[rows]' if spec.dims else ''},"
                  for spec in contract.outputs]
        lines += [
            "    }",
            "    keys = [key for key in cotangents if out[key].requires_grad]",
            f"    inputs = [{', '.join(differentiable)}]",
            "    grads = torch.autograd.grad([out[key] for key in keys], inputs, allow_unused=True,",
            "                                grad_outputs=[torch.tensor(cotangents[key], dtype=out[key].dtype)",
            "                                              for key in keys]) if keys else [None] * len(inputs)",
        ]
        for index, spec in enumerate(contract.differentiable_inputs):
            block = ", ".join(f"block[{axis!r}]" for axis in spec.mesh)
            lines.append(f"    got = None if grads[{index}] is None else grads[{index}].detach().double()")
            if "sequence" not in spec.mesh:
                lines += ["    # a per-row input is replicated over its sequence group: its gradient sums over them",
                          "    if got is not None:",
                          "        dist.all_reduce(got, group=sequence_groups[d])"]
            name = spec.name.upper()
            lines.append(f"    check(f'rank {{rank}} d {spec.name}', None if got is None else got.numpy(), "
                         f"EXPECTED_D_{name}[{block}], TOLERANCE_D_{name}[{block}], problems)")
    lines += [
        "    dist.destroy_process_group()",
        "    assert not problems, '\\n'.join(problems)",
        "",
        "",
        "if __name__ == '__main__':",
        "    with socket.socket() as s:",
        "        s.bind(('127.0.0.1', 0))",
        "        port = s.getsockname()[1]",
        "    torch.multiprocessing.spawn(run_rank, args=(port,), nprocs=DATA * SEQUENCE)",
    ]
    return "\n".join(lines) + "\n"


def jax_snippet(subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
                failures: list[str], plain: bool) -> str:
    contract = case.contract
    how = (f"jax.jit with inputs sharded over a {split.data}x{split.sequence} mesh" if plain else
           f"jax.shard_map over a {split.data}x{split.sequence} mesh (data x sequence) of host CPU devices; "
           "uneven shards are padded with masked tokens and fully masked rows, which change nothing")
    flag = f"--xla_force_host_platform_device_count={split.world}"
    padded = pad_for_shard_map(case, split)
    dtype = "ml_dtypes.bfloat16" if case.dtype == "bfloat16" else f"np.{case.dtype}"
    in_specs = ", ".join(f"P({', '.join(repr(axis) for axis in spec.mesh)})" for spec in contract.inputs)
    outputs = {spec.name: f"P({', '.join(repr('data') for dim in spec.dims if dim == 'batch')})"
               for spec in contract.outputs}
    out_specs = ("{" + ", ".join(f"{name!r}: {spec}" for name, spec in outputs.items()) + "}"
                 if contract.returns_mapping else next(iter(outputs.values())))
    lines = [
        "import os",
        f"os.environ['XLA_FLAGS'] = os.environ.get('XLA_FLAGS', '') + ' {flag}'  # before JAX starts",
        *_header(subject, padded.case, failures, how),
        "import jax",
        "jax.config.update('jax_enable_x64', True)",
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P",
        *(["import ml_dtypes"] if case.dtype == "bfloat16" else []),
        "",
        *_expected_lines(subject, case, cotangents, cotangents, padded),
        CHECK_FUNCTION,
        f"DTYPE = {dtype}",
        f"mesh = Mesh(np.array(jax.devices('cpu')[:{split.world}]).reshape({split.data}, {split.sequence}), "
        "('data', 'sequence'))",
        f"in_specs = ({in_specs},)",
        "inputs = [jax.device_put(x, NamedSharding(mesh, spec)) for x, spec in zip(",
        "    (" + ", ".join(spec.name.upper() + ("" if spec.kind == "bool" else ".astype(DTYPE)")
                        for spec in contract.inputs) + ",), in_specs)]",
    ]
    if plain:
        lines.append(f"fn = jax.jit({subject.function_name})")
    else:
        lines += [f"fn = jax.jit(jax.shard_map({subject.function_name}, mesh=mesh, in_specs=in_specs,",
                  f"    out_specs={out_specs}))"]
    lines.append("problems = []")
    if cotangents is None:
        allowed = list(contract.output_dtypes(case.dtype))
        lines.append(f"out = {_as_outputs(contract, 'fn(*inputs)')}")
        for spec in contract.outputs:
            lines += [f"if str(out[{spec.name!r}].dtype) not in {allowed!r}:",
                      f"    problems.append(f'{spec.name} has dtype {{out[{spec.name!r}].dtype}}')",
                      f"check({spec.name!r}, out[{spec.name!r}], EXPECTED_{spec.name.upper()}, "
                      f"TOLERANCE_{spec.name.upper()}, problems)"]
    else:
        positions = [index for index, spec in enumerate(contract.inputs) if spec.differentiable]
        lines += [
            f"POSITIONS = {positions!r}",
            "",
            "def differentiable_part(*varied):",
            "    full = list(inputs)",
            "    for index, value in zip(POSITIONS, varied):",
            "        full[index] = value",
            f"    return {_as_outputs(contract, 'fn(*full)')}",
            "",
            "out, pullback = jax.vjp(differentiable_part, *[inputs[i] for i in POSITIONS])",
            "grads = pullback({k: globals()['COTANGENT_' + k.upper()].astype(v.dtype) for k, v in out.items()})",
        ]
        for index, spec in enumerate(contract.differentiable_inputs):
            lines.append(f"check('d {spec.name}', grads[{index}], EXPECTED_D_{spec.name.upper()}, "
                         f"TOLERANCE_D_{spec.name.upper()}, problems)")
    lines.append("assert not problems, '\\n'.join(problems)")
    return "\n".join(lines) + "\n"
