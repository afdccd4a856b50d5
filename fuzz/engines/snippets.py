"""A failing sharded example as a script that launches the ranks itself: torch.multiprocessing.spawn on
gloo (127.0.0.1), or a shard_map (or a plain jit of sharded inputs) over host-platform CPU devices. Save it as
a file and run it (spawned ranks import the main module, so it cannot be piped to `python -`); it exits
non-zero while the bug is there. The engines call these: the sharded ones (torch_ranks.py, jax_mesh.py,
jax_plain.py) and the micro-batch ones (accumulation.py, torch_ddp.py, jax_accumulation.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzz.engines.judge import summed_over_replicas
from fuzz.engines.split import Padded, Split, pad_cotangents, pad_for_shard_map, padding_fill
from fuzz.report.literals import bool_literal, literal
from fuzz.report.snippet import PRINT_OPTIONS, comment_lines, failure_comments, plural, wrapping_lines
from reference.case import Case
from reference.exact import exact_results, exact_tolerance


def _header(subject: Any, case: Case, failures: list[str], how: str) -> list[str]:
    lines = [
        *comment_lines(f"Counterexample found by `python -m fuzz check --sharded` (or the API's sharded=): {how}."),
        "# Save as a file and run it (the ranks import this file); it fails while the bug is there.",
        *failure_comments(failures),
        *([f"# contract: {case.contract.label}"] if case.contract.bound else []),
        f"# dtype {case.dtype}, shape {case.shape}",
        "from math import inf, nan",
        "import numpy as np",
        *subject.import_lines,
        PRINT_OPTIONS,
        "",
    ]
    for spec in case.contract.inputs:
        value = case.values[spec.name]
        text = bool_literal(value) + ", dtype=bool" if spec.kind == "bool" else literal(value)
        lines.append(f"{spec.name.upper()} = np.array({text}).reshape{tuple(value.shape)!r}")
    return lines


def _expected_lines(subject: Any, case: Case, cotangents: dict[str, np.ndarray] | None,
                    exact_cotangents: dict[str, np.ndarray] | None, padded: Padded | None = None) -> list[str]:
    """Exact values and tolerances of `case`; with `padded`, placed where its rows and tokens went (padded
    positions: exactly 0, tolerance 0)."""
    contract, expected = case.contract, exact_results(case)
    tol = exact_tolerance(case, subject.precision)

    def place(values: np.ndarray, dims: tuple[str, ...]) -> np.ndarray:
        return values if padded is None else padded.place(np.asarray(values, dtype=np.float64), dims)

    lines = ["# exact float64 results of the whole batch, and the tolerance the suite's error model allows"]
    for spec in contract.outputs:
        want = place(expected.outputs()[spec.name], spec.dims)
        lines += [f"EXPECTED_{spec.name.upper()} = np.array({literal(want)})",
                  f"TOLERANCE_{spec.name.upper()} = np.array({literal(place(tol[spec.name], spec.dims))})"]
    if cotangents is not None and exact_cotangents is not None:
        exact = contract.vjp(case, exact_cotangents, expected)
        tolerances = contract.gradient_tolerance(exact, exact_cotangents, case.dtype, subject.precision)
        given = cotangents if padded is None else pad_cotangents(padded, cotangents)
        lines += [f"COTANGENT_{key.upper()} = np.array({literal(value)})" for key, value in given.items()]
        lines.append("# the exact VJP (cotangents summed over replicas where each replica receives one)")
        for spec in contract.differentiable_inputs:
            shape = tuple(value for value in (padded.case if padded else case).values[spec.name].shape)
            lines += [f"EXPECTED_D_{spec.name.upper()} = np.array("
                      f"{literal(place(exact.inputs()[spec.name], spec.dims))}).reshape{shape!r}",
                      f"TOLERANCE_D_{spec.name.upper()} = np.array("
                      f"{literal(place(tolerances[spec.name][0], spec.dims))}).reshape{shape!r}"]
    return lines


CHECK_FUNCTION = '''
def check_close(name, got, want, tol, problems):
    if got is None:
        problems.append(f"{name}: no gradient (the outputs do not reach this input)")
        return
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(want))
    print(f"{name}: got {got}, expected {want}")
    if not np.isfinite(got).all() or (np.abs(got - want) > tol).any():
        problems.append(f"{name}: got {got}, expected {want} +- {np.asarray(tol)}")
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
                f"    check_close(f'rank {{rank}} {spec.name}', got.detach().double().numpy(), "
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
            lines.append(f"    check_close(f'rank {{rank}} d {spec.name}', None if got is None else got.numpy(), "
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
    padded = pad_for_shard_map(case, split, padding_fill(subject.masked_values))
    dtype = "ml_dtypes.bfloat16" if case.dtype == "bfloat16" else f"np.{case.dtype}"
    in_specs = ", ".join(f"P({', '.join(repr(axis) for axis in spec.mesh)})" for spec in contract.inputs)
    outputs = {spec.name: f"P({', '.join(repr('data') for dim in spec.dims if dim == 'batch')})"
               for spec in contract.outputs}
    out_specs = ("{" + ", ".join(f"{name!r}: {spec}" for name, spec in outputs.items()) + "}"
                 if contract.returns_mapping else next(iter(outputs.values())))
    lines = [
        "import os",
        "# before JAX starts: its host CPU devices",
        f"os.environ['XLA_FLAGS'] = os.environ.get('XLA_FLAGS', '') + ' {flag}'",
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
                      f"    problems.append({spec.name + ' has dtype '!r} + str(out[{spec.name!r}].dtype))",
                      f"check_close({spec.name!r}, out[{spec.name!r}], EXPECTED_{spec.name.upper()}, "
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
            lines.append(f"check_close('d {spec.name}', grads[{index}], EXPECTED_D_{spec.name.upper()}, "
                         f"TOLERANCE_D_{spec.name.upper()}, problems)")
    lines.append("assert not problems, '\\n'.join(problems)")
    return "\n".join(lines) + "\n"


def accumulation_snippet(subject: Any, case: Case, split: Any, cotangents: dict[str, np.ndarray] | None,
                         failures: list[str]) -> str:
    """A script that calls the per-chunk function on each chunk of the step, combines as declared, and asserts
    the full step's output (or, with cotangents, every token's combined gradient)."""
    from fuzz.engines.chunks import chunk_case, chunk_weight, step_keywords
    from impls.frameworks import adapter_class

    contract, expected = case.contract, exact_results(case)
    syntax = adapter_class(subject.adapter.name).snippet_syntax(case)
    keywords, weight = step_keywords(case, split), chunk_weight(case, split)
    tol = exact_tolerance(case, subject.precision)
    output = contract.outputs[0].name
    lines = [
        "# Counterexample found by `python -m fuzz check --accumulation` (or the API's accumulation=True):",
        f"# {plural(split.ranks, 'rank')} x {plural(split.steps, 'accumulation step')}, in one process.",
        *failure_comments(failures),
        f"# contract: {contract.label}",
        f"# dtype {case.dtype}; the step's batch {case.shape}, rows cut at {list(split.cuts)}, "
        f"chunk widths {list(split.widths)}",
        "from math import inf, nan",
        "import functools",
        *dict.fromkeys(["import numpy as np", *syntax.imports, *subject.import_lines]),
        *(wrapping_lines(subject.function_name, subject.wrap) if subject.wrap else []),
        *syntax.helpers,
        "",
        "# the step's global normalizers, the same for every chunk",
        f"KEYWORDS = {keywords!r}",
        "# each chunk's share of the combined loss: 1/R under the ranks' mean, 1/G under 1/G",
        f"WEIGHT = {weight!r}",
        "",
        PRINT_OPTIONS,
        f"def as_float64(x):\n    return {syntax.as_float64}",
        "",
        "chunks = []",
    ]
    for k in range(split.chunks):
        chunk = chunk_case(case, split, k)
        arrays = []
        for spec in contract.inputs:
            values = chunk.values[spec.name]
            if values.size:
                text = bool_literal(values) if spec.kind == "bool" else literal(values)
                make = syntax.bool_array if spec.kind == "bool" else syntax.float_array
                arrays.append(make.format(values=text))
            else:  # an empty chunk: an empty array of its shape
                make = syntax.bool_array if spec.kind == "bool" else syntax.float_array
                arrays.append(syntax.reshape.format(buffer=make.format(values="[]"), shape=values.shape))
        lines += [f"# {split.describe(k)}", "chunks.append((", *(f"    {array}," for array in arrays), "))"]
    call = f"functools.partial({subject.function_name}, **KEYWORDS)"
    allowed = list(contract.output_dtypes(case.dtype))
    empty = [k for k in range(split.chunks) if chunk_case(case, split, k).shape[0] == 0]  # as the engine checks
    if cotangents is None:
        shape = contract.output_shape(output, case.sizes)
        lines += [
            f"returned = [{call}(*chunk) for chunk in chunks]",
            "# each chunk's loss: an array of the framework, of an allowed dtype, as the suite checks first",
            "for k, out in enumerate(returned):",
            f"    assert type(out).__name__ in {syntax.type_names!r}, \\",
            f"        f'chunk {{k}}: {output} has type {{type(out).__name__}}, "
            f"expected {' or '.join(syntax.type_names)}'",
            "    dtype = str(out.dtype).split('.')[-1]",
            f"    assert dtype in {allowed!r}, \\",
            f"        f'chunk {{k}}: {output} of dtype {{dtype}}, want {' or '.join(allowed)}'",
            f"    assert tuple(out.shape) == {shape!r}, \\",
            f"        f'chunk {{k}}: {output} has shape {{tuple(out.shape)}}, expected {shape!r}'",
            "losses = [as_float64(out) for out in returned]",
            *([f"# the chunks without rows: each one's {output} must be exactly 0",
               f"for k in {empty!r}:",
               "    assert float(losses[k]) == 0, \\",
               f"        f'chunk {{k}} holds no rows: its {output} is {{float(losses[k])!r}}, expected exactly 0'"]
              if empty else []),
            "combined = sum(WEIGHT * float(value) for value in losses)",
            f"expected, tolerance = {float(expected.outputs()[output])!r}, {float(tol[output])!r}",
            "print(f'combined loss {combined!r}, expected {expected!r} +- {tolerance!r}; chunk losses {losses}')",
            "assert abs(combined - expected) <= tolerance, f'combined loss {combined!r}, expected {expected!r}'",
        ]
        return "\n".join(lines) + "\n"
    exact = contract.vjp(case, cotangents, expected)
    tolerances = contract.gradient_tolerance(exact, cotangents, case.dtype, subject.precision)
    spec = contract.differentiable_inputs[0]
    lines += [
        f"cotangent_{output} = np.array({float(np.asarray(cotangents[output])) * weight!r})  # c times WEIGHT",
        f"grad = np.zeros({tuple(case.sizes[dim] for dim in spec.dims)!r})",
        f"CUTS, WIDTHS = {list(split.cuts)!r}, {list(split.widths)!r}",
        "for k, chunk in enumerate(chunks):",
        f"    {', '.join(contract.input_names)} = chunk",
        f"    chunk_fn = {call}",
        *[f"    {line.format(function='chunk_fn')}" for line in syntax.vjp],
        "    got = forward_and_backward()[0]",
        "    assert got is not None, f'chunk {k}: no gradient (the loss does not reach the losses)'",
        "    grad[CUTS[k]:CUTS[k + 1], :WIDTHS[k]] = as_float64(got)",
        f"expected = np.array({literal(exact.inputs()[spec.name])})",
        f"tolerance = np.array({literal(tolerances[spec.name][0])})",
        "print(f'combined gradient {grad}, expected {expected}')",
        "assert np.isfinite(grad).all() and (np.abs(grad - expected) <= tolerance).all(), 'combined gradient wrong'",
    ]
    return "\n".join(lines) + "\n"


def ddp_snippet(subject: Any, case: Case, split: Any, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
    """A script that runs the step on R gloo ranks under DistributedDataParallel, as the DDP engine does, and
    asserts the combined loss (or the averaged gradient)."""
    from fuzz.engines.chunks import chunk_weight

    contract, expected = case.contract, exact_results(case)
    weight, output = chunk_weight(case, split), contract.outputs[0].name
    values_name = contract.differentiable_inputs[0].name  # the per-token values: the DDP module's parameter
    tol = exact_tolerance(case, subject.precision)
    averaged = contract.chunked.ranks_averaged(contract.bound)
    scale = weight * (split.ranks if averaged else 1.0)
    lines = [
        "# Counterexample found by `python -m fuzz check --accumulation --ranks` (or the API's ranks=True):",
        f"# {plural(split.ranks, 'gloo rank')} x {plural(split.steps, 'micro-batch')} under DistributedDataParallel.",
        "# Save as a file and run it (the ranks import this file); it fails while the bug is there.",
        *failure_comments(failures),
        f"# contract: {contract.label}",
        "from math import inf, nan",
        *(["import contextlib, socket"] if cotangents is not None else ["import socket"]),
        "import numpy as np",
        "import torch",
        "import torch.distributed as dist",
        "import torch.multiprocessing",
        "from torch.nn.parallel import DistributedDataParallel",
        *subject.import_lines,
        PRINT_OPTIONS,
        "",
        f"LOSSES = np.array({literal(case.values[values_name])}).reshape{tuple(case.shape)!r}",
        f"MASK = np.array({bool_literal(case.mask)}, dtype=bool).reshape{tuple(case.shape)!r}",
        f"DTYPE = torch.{case.dtype}",
        f"RANKS, STEPS, CUTS, WIDTHS = {split.ranks}, {split.steps}, {list(split.cuts)!r}, {list(split.widths)!r}",
        f"SUM_OVER_RANKS = {not averaged!r}",
        f"WEIGHT = {weight!r}  # each chunk's share of the combined loss",
        f"EXPECTED, TOLERANCE = {float(expected.outputs()[output])!r}, {float(tol[output])!r}",
    ]
    if cotangents is not None:
        exact = contract.vjp(case, cotangents, expected)
        name = contract.differentiable_inputs[0].name
        gradient_tol = contract.gradient_tolerance(exact, cotangents, case.dtype, subject.precision)[name][0]
        lines += [f"COTANGENT = {float(np.asarray(cotangents[output])) * scale!r}  # c times 1/G (DDP divides by R)",
                  f"EXPECTED_GRAD = np.array({literal(exact.inputs()[name])}).reshape{tuple(case.shape)!r}",
                  f"GRAD_TOLERANCE = np.array({literal(gradient_tol)}).reshape{tuple(case.shape)!r}"]
    # forward: the loss of each micro-batch; with a cotangent, its backward too, DDP all-reducing the gradients on the
    # last micro-batch's backward only (no_sync before), as a trainer accumulates
    body = ["chunk = step()[CUTS[k]:CUTS[k + 1], :WIDTHS[k]]",
            f"out = {subject.function_name}(chunk, masks[g], step_masks=masks, group=dist.group.WORLD,",
            "          accumulation_steps=STEPS)",
            "losses.append(float(out.detach()))"]
    if cotangents is not None:
        body = ["with contextlib.nullcontext() if g == STEPS - 1 else step.no_sync():",
                *(f"    {line}" for line in body), "    out.backward(torch.tensor(COTANGENT, dtype=out.dtype))"]
    lines += [
        "",
        "",
        "class Step(torch.nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "        finite = np.nan_to_num(LOSSES, nan=0.0, posinf=0.0, neginf=0.0)  # LOSSES is copied in later",
        "        self.losses = torch.nn.Parameter(torch.tensor(finite, dtype=DTYPE))",
        "",
        "    def forward(self):",
        "        return self.losses",
        "",
        "",
        "def run_rank(rank, port, results):",
        "    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,",
        "                            world_size=RANKS)",
        "    step = DistributedDataParallel(Step())",
        "    with torch.no_grad():",
        "        step.module.losses.copy_(torch.tensor(LOSSES, dtype=DTYPE))",
        "    if SUM_OVER_RANKS:",
        "        step.register_comm_hook(None, lambda state, bucket: dist.all_reduce(",
        "            bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0]))",
        "    mine = [rank * STEPS + g for g in range(STEPS)]",
        "    masks = [torch.tensor(MASK[CUTS[k]:CUTS[k + 1], :WIDTHS[k]]) for k in mine]",
        "    losses = []",
        "    for g, k in enumerate(mine):",
        *(f"        {line}" for line in body),
        "    grad = step.module.losses.grad",
        "    results[rank] = (losses, None if grad is None else grad.double().numpy().tolist())",
        "    dist.destroy_process_group()",
        "",
        "",
        "if __name__ == '__main__':",
        "    with socket.socket() as s:",
        "        s.bind(('127.0.0.1', 0))",
        "        port = s.getsockname()[1]",
        "    results = torch.multiprocessing.Manager().dict()",
        "    torch.multiprocessing.spawn(run_rank, args=(port, results), nprocs=RANKS)",
    ]
    if cotangents is None:
        lines += ["    combined = WEIGHT * sum(sum(results[rank][0]) for rank in range(RANKS))",
                  "    print(f'combined loss {combined!r}, expected {EXPECTED!r} +- {TOLERANCE!r}')",
                  "    assert abs(combined - EXPECTED) <= TOLERANCE, f'combined {combined!r}, expected {EXPECTED!r}'"]
    else:
        lines += ["    grad = results[0][1]",
                  "    assert grad is not None, 'the losses got no gradient'",
                  "    grad = np.array(grad)",
                  "    print(f'averaged gradient {grad}, expected {EXPECTED_GRAD}')",
                  "    assert (np.abs(grad - EXPECTED_GRAD) <= GRAD_TOLERANCE).all(), 'the averaged gradient is wrong'"]
    return "\n".join(lines) + "\n"


def jax_accumulation_snippet(subject: Any, case: Case, split: Any, cotangents: dict[str, np.ndarray] | None,
                             failures: list[str]) -> str:
    """A script that runs the step under jax.shard_map over R host CPU devices, a lax.scan over each device's G
    micro-batches, as the JAX rank engine does (fuzz/engines/jax_accumulation.py), and asserts the combined loss
    (or the combined gradient)."""
    from fuzz.engines.chunks import chunk_weight

    contract, expected = case.contract, exact_results(case)
    weight, output = chunk_weight(case, split), contract.outputs[0].name
    values_name = contract.differentiable_inputs[0].name
    tol = exact_tolerance(case, subject.precision)
    averaged = contract.chunked.ranks_averaged(contract.bound)
    scale = weight * (split.ranks if averaged else 1.0)
    builtin = bool(subject.key) and subject.key[0] == "builtin"
    parameters = dict(contract.bound) if builtin else {}  # a built-in's declared parameters, as the engine binds them
    empty = [k for k in range(split.chunks) if not case.mask[split.rows(k)].any()]
    lines = [
        *comment_lines("Counterexample found by `python -m fuzz check --accumulation --ranks --framework jax` (or the "
                       f"API's ranks=True): {plural(split.ranks, 'device')} x {plural(split.steps, 'micro-batch')} "
                       "under jax.shard_map (host CPU devices), a lax.scan over each device's micro-batches. Every "
                       "micro-batch has ROWS rows (fully masked rows are rows of the step) and is padded to WIDTH "
                       "with masked tokens."),
        *failure_comments(failures),
        f"# contract: {contract.label}",
        "import os",
        "# before JAX starts: its host CPU devices",
        "os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')",
        f"                           + ' --xla_force_host_platform_device_count={split.ranks}')",
        "from math import inf, nan",
        "import numpy as np",
        "import jax",
        *(["jax.config.update('jax_enable_x64', True)  # float64 exists only in 64-bit mode"]
          if case.dtype == "float64" else []),
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P",
        *(["import ml_dtypes"] if case.dtype == "bfloat16" else []),
        *subject.import_lines,
        PRINT_OPTIONS,
        "",
        f"LOSSES = np.array({literal(case.values[values_name])}).reshape{tuple(case.shape)!r}",
        f"MASK = np.array({bool_literal(case.mask)}, dtype=bool).reshape{tuple(case.shape)!r}",
        f"DTYPE = {'ml_dtypes.bfloat16' if case.dtype == 'bfloat16' else f'np.{case.dtype}'}",
        f"RANKS, STEPS, ROWS, WIDTH = {split.ranks}, {split.steps}, {split.rows_per_chunk}, {split.width}",
        f"FILL = {'0.0' if subject.masked_values == 'finite' else 'nan'}  # the masked tokens padding to WIDTH",
        f"SUM_OVER_RANKS = {not averaged!r}",
        f"WEIGHT = {weight!r}  # each chunk's share of the combined loss",
        f"PARAMETERS = {parameters!r}",
        f"EMPTY = {empty!r}  # the chunks without a selected token: their loss must be exactly 0",
        f"EXPECTED, TOLERANCE = {float(expected.outputs()[output])!r}, {float(tol[output])!r}",
    ]
    if cotangents is not None:
        exact = contract.vjp(case, cotangents, expected)
        gradient_tol = contract.gradient_tolerance(exact, cotangents, case.dtype, subject.precision)[values_name][0]
        lines += [f"COTANGENT = {float(np.asarray(cotangents[output])) * scale!r}  # c times WEIGHT (times R "
                  "against lax.pmean)",
                  f"EXPECTED_GRAD = np.array({literal(exact.inputs()[values_name])}).reshape{tuple(case.shape)!r}",
                  f"GRAD_TOLERANCE = np.array({literal(gradient_tol)}).reshape{tuple(case.shape)!r}"]
    lines += [
        "",
        "values = np.full((LOSSES.shape[0], WIDTH), FILL)",
        "values[:, :LOSSES.shape[1]] = LOSSES",
        "mask = np.zeros((MASK.shape[0], WIDTH), dtype=bool)",
        "mask[:, :MASK.shape[1]] = MASK",
        "# chunk k = rank k // STEPS, micro-batch k % STEPS: shard_map gives each device STEPS of them",
        "values, mask = values.reshape(RANKS * STEPS, ROWS, WIDTH), mask.reshape(RANKS * STEPS, ROWS, WIDTH)",
        "mesh = Mesh(np.array(jax.devices('cpu')[:RANKS]), ('data',))",
        "sharding = NamedSharding(mesh, P('data'))",
        "arguments = [jax.device_put(values.astype(DTYPE), sharding), jax.device_put(mask, sharding)]",
        "",
        "",
        "def call_chunk(value, m, step_masks):",
        f"    return {subject.function_name}(value, m, step_masks=step_masks, axis_name='data',",
        f"    {' ' * len(subject.function_name)}        accumulation_steps=STEPS, **PARAMETERS)",
        "",
        "",
    ]
    if cotangents is None:
        lines += [
            "def forward(values, masks):",
            "    step_masks = [masks[g] for g in range(STEPS)]",
            "    return lax.scan(lambda carry, chunk: (carry, call_chunk(*chunk, step_masks)), None,",
            "                    (values, masks))[1]",
            "",
            "",
            "step = jax.jit(jax.shard_map(forward, mesh=mesh, in_specs=(P('data'), P('data')),",
            "                             out_specs=P('data')))",
            "losses = np.asarray(step(*arguments)).astype(np.float64)",
            "combined = WEIGHT * float(losses.sum())",
            "print(f'combined loss {combined!r}, expected {EXPECTED!r} +- {TOLERANCE!r}; chunk losses '",
            "      f'{losses.tolist()}')",
            "assert all(losses[k] == 0 for k in EMPTY), \\",
            "    f'a chunk without a selected token: {losses[EMPTY].tolist()}'",
            "assert abs(combined - EXPECTED) <= TOLERANCE, f'combined {combined!r}, expected {EXPECTED!r}'",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        "def forward_and_backward(values, masks, cotangent):",
        "    step_masks = [masks[g] for g in range(STEPS)]",
        "",
        "    def micro_batch(total, chunk):",
        "        g, value, m = chunk",
        "        out, pullback = jax.vjp(lambda v: call_chunk(v, m, step_masks), value)",
        "        (gradient,) = pullback(jnp.zeros_like(out) + cotangent.astype(out.dtype))",
        "        return total.at[g].add(gradient), out",
        "",
        "    total, outs = lax.scan(micro_batch, jnp.zeros_like(values), (jnp.arange(STEPS), values, masks))",
        "    mine = jnp.zeros((RANKS, *total.shape), total.dtype).at[lax.axis_index('data')].set(total)",
        "    return outs, lax.psum(mine, 'data') if SUM_OVER_RANKS else lax.pmean(mine, 'data')",
        "",
        "",
        "step = jax.jit(jax.shard_map(forward_and_backward, mesh=mesh, in_specs=(P('data'), P('data'), P()),",
        "                             out_specs=(P('data'), P())))",
        "_, grad = step(*arguments, np.asarray(COTANGENT))",
        "grad = np.asarray(grad).astype(np.float64).reshape(-1, WIDTH)",
        "assert (grad[:, LOSSES.shape[1]:] == 0).all(), 'the gradient at the masked padding tokens is not 0'",
        "grad = grad[:, :LOSSES.shape[1]]",
        "print(f'combined gradient {grad}, expected {EXPECTED_GRAD}')",
        "assert np.isfinite(grad).all() and (np.abs(grad - EXPECTED_GRAD) <= GRAD_TOLERANCE).all(), \\",
        "    'the combined gradient is wrong'",
    ]
    return "\n".join(lines) + "\n"
