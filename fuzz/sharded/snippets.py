"""A failing sharded example as a script that launches the ranks itself: torch.multiprocessing.spawn on
gloo (127.0.0.1), or a shard_map over host-platform CPU devices. Save it as a file and run it (spawned
ranks import the main module, so it cannot be piped to `python -`); it exits non-zero while the bug is there.
"""

from __future__ import annotations

import numpy as np

from fuzz.campaign import Subject
from fuzz.sharded.judge import summed_over_replicas
from fuzz.sharded.split import Padded, Split, pad_cotangents, pad_for_shard_map
from impls.case import Case
from reference import reference, vjp
from reference.tolerance import Precision, gradient_tolerance, tolerance


def _literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=np.float64).tolist())


def _bool_literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=bool).tolist())


def _header(subject: Subject, case: Case, failures: list[str], how: str) -> list[str]:
    return [
        f"# Counterexample found by `python -m fuzz check --sharded`: {how}.",
        "# Save as a file and run it (the ranks import this file); it fails while the bug is there.",
        *[f"# FAILED: {failure}" for failure in failures],
        f"# dtype {case.dtype}, shape {case.shape}",
        "from math import inf, nan",
        "import numpy as np",
        *subject.import_lines,
        "",
        f"TOKEN_LOG_PROBS = np.array({_literal(case.token_log_probs)}).reshape{case.shape}",
        f"ADVANTAGES = np.array({_literal(case.advantages)}).reshape({case.shape[0]},)",
        f"TOKEN_MASK = np.array({_bool_literal(case.token_mask)}, dtype=bool).reshape{case.shape}",
    ]


def _expected_lines(case: Case, cotangents: dict[str, np.ndarray] | None, exact_cotangents: dict | None,
                    precision: Precision, padded: Padded | None = None) -> list[str]:
    """Expected values and tolerances of `case`; with `padded`, placed where its rows and tokens went (padded
    positions: exactly 0, tolerance 0)."""
    expected = reference(case.token_log_probs, case.advantages, case.token_mask)
    tol = tolerance(expected, case.dtype, precision)
    rows = (slice(None),) if padded is None else (padded.row_index,)
    cells = (slice(None), slice(None)) if padded is None else np.ix_(padded.row_index, padded.token_index)
    shape = case.shape if padded is None else padded.case.shape

    def place(values: np.ndarray, where: tuple) -> np.ndarray:
        if values.ndim == 0:
            return values
        out = np.zeros(shape[: values.ndim])
        out[where] = values
        return out

    lines = ["# exact float64 results of the whole batch, and the tolerance the suite's error model allows"]
    for key, value in expected.outputs().items():
        lines += [f"EXPECTED_{key.upper()} = np.array({_literal(place(value, rows))})",
                  f"TOLERANCE_{key.upper()} = np.array({_literal(place(tol.as_dict()[key], rows))})"]
    if cotangents is not None and exact_cotangents is not None:
        exact = vjp(case.token_log_probs, case.advantages, case.token_mask, exact_cotangents)
        gradient_tol = gradient_tolerance(exact, exact_cotangents, case.dtype, precision)
        given = cotangents if padded is None else pad_cotangents(padded, cotangents)
        lines += [f"COTANGENT_{key.upper()} = np.array({_literal(value)})" for key, value in given.items()]
        lines += ["# the exact VJP (cotangents summed over replicas where each replica receives one)",
                  f"EXPECTED_D_LOG_PROBS = np.array({_literal(place(exact.token_log_probs, cells))})"
                  f".reshape{shape}",
                  f"TOLERANCE_D_LOG_PROBS = np.array({_literal(place(gradient_tol.token_log_probs, cells))})"
                  f".reshape{shape}",
                  f"EXPECTED_D_ADVANTAGES = np.array({_literal(place(exact.advantages, rows))})",
                  f"TOLERANCE_D_ADVANTAGES = np.array({_literal(place(gradient_tol.advantages, rows))})"]
    return lines


CHECK_FUNCTION = '''
def check(name, got, want, tol, problems):
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(want))
    print(f"{name}: got {got.tolist()}, expected {want.tolist()}")
    if not np.isfinite(got).all() or (np.abs(got - want) > tol).any():
        problems.append(f"{name}: got {got.tolist()}, expected {want.tolist()} +- {np.asarray(tol).tolist()}")
'''


def _torch_snippet(subject: Subject, case: Case, split: Split, cotangents: dict | None, failures: list[str]) -> str:
    exact_cotangents = summed_over_replicas(cotangents, split) if cotangents is not None else None
    lines = _header(subject, case, failures, f"torch.distributed, mesh {split.data}x{split.sequence} "
                    "(data x sequence), gloo ranks on 127.0.0.1")
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
        *_expected_lines(case, cotangents, exact_cotangents, subject.precision),
        CHECK_FUNCTION,
        "def run_rank(rank, port):",
        "    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,",
        "                            world_size=DATA * SEQUENCE)",
        "    data_groups = [dist.new_group([d * SEQUENCE + q for d in range(DATA)]) for q in range(SEQUENCE)]",
        "    sequence_groups = [dist.new_group([d * SEQUENCE + q for q in range(SEQUENCE)]) for d in range(DATA)]",
        "    d, q = divmod(rank, SEQUENCE)",
        "    rows, tokens = slice(ROW_CUTS[d], ROW_CUTS[d + 1]), slice(TOKEN_CUTS[q], TOKEN_CUTS[q + 1])",
        "    token_log_probs = torch.tensor(TOKEN_LOG_PROBS[rows, tokens], dtype=DTYPE)",
        "    advantages = torch.tensor(ADVANTAGES[rows], dtype=DTYPE)",
        "    token_mask = torch.tensor(TOKEN_MASK[rows, tokens])",
        "    problems = []",
    ]
    call = (f"{subject.function_name}(token_log_probs, advantages, token_mask, data_group=data_groups[q], "
            "sequence_group=sequence_groups[d])")
    if cotangents is None:
        lines += [
            f"    out = {call}",
            "    for key in ('sequence_summed', 'token_averaged', 'magnitude_ratio'):",
            "        if not isinstance(out[key], torch.Tensor) or out[key].dtype != DTYPE:",
            "            problems.append(f'{key}: a {type(out[key]).__name__} of dtype {out[key].dtype}')",
            "        got = out[key].detach().double().numpy()",
            "        want = globals()['EXPECTED_' + key.upper()]",
            "        tol = globals()['TOLERANCE_' + key.upper()]",
            "        if key != 'magnitude_ratio':",
            "            want, tol = want[rows], tol[rows]",
            "        check(f'rank {rank} {key}', got, want, tol, problems)",
        ]
    else:
        lines += [
            "    token_log_probs.requires_grad_(True)",
            "    advantages.requires_grad_(True)",
            f"    out = {call}",
            "    # every replica receives the cotangent of what it returns",
            "    grad_outputs = [torch.tensor(COTANGENT_SEQUENCE_SUMMED[rows], dtype=DTYPE),",
            "                    torch.tensor(COTANGENT_TOKEN_AVERAGED[rows], dtype=DTYPE),",
            "                    torch.tensor(COTANGENT_MAGNITUDE_RATIO, dtype=DTYPE)]",
            "    keys = ['sequence_summed', 'token_averaged', 'magnitude_ratio']",
            "    used = [i for i, key in enumerate(keys) if out[key].requires_grad]",
            "    grads = torch.autograd.grad([out[keys[i]] for i in used], [token_log_probs, advantages],",
            "                                grad_outputs=[grad_outputs[i] for i in used], allow_unused=True)",
            "    d_log_probs, d_advantages = [torch.zeros_like(x) if g is None else g.detach()",
            "                                 for g, x in zip(grads, (token_log_probs, advantages))]",
            "    # a row's advantage is replicated over its sequence group: its gradient is the sum over replicas",
            "    d_advantages = d_advantages.double()",
            "    dist.all_reduce(d_advantages, group=sequence_groups[d])",
            "    check(f'rank {rank} d token_log_probs', d_log_probs.double().numpy(),",
            "          EXPECTED_D_LOG_PROBS[rows, tokens], TOLERANCE_D_LOG_PROBS[rows, tokens], problems)",
            "    check(f'rank {rank} d advantages (summed over the sequence group)', d_advantages.numpy(),",
            "          EXPECTED_D_ADVANTAGES[rows], TOLERANCE_D_ADVANTAGES[rows], problems)",
        ]
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


def _jax_snippet(subject: Subject, case: Case, split: Split, cotangents: dict | None, failures: list[str],
                 plain: bool) -> str:
    how = (f"jax.jit with inputs sharded over a {split.data}x{split.sequence} mesh" if plain else
           f"jax.shard_map over a {split.data}x{split.sequence} mesh (data x sequence) of host CPU devices; "
           "uneven shards are padded with masked tokens and fully masked rows, which change nothing")
    flag = f"--xla_force_host_platform_device_count={split.world}"
    padded = pad_for_shard_map(case, split)
    lines = [
        "import os",
        f"os.environ['XLA_FLAGS'] = os.environ.get('XLA_FLAGS', '') + ' {flag}'  # before JAX starts",
        *_header(subject, padded.case, failures, how),
        "import jax",
        "jax.config.update('jax_enable_x64', True)",
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P",
        "import ml_dtypes" if case.dtype == "bfloat16" else "",
        "",
        *_expected_lines(case, cotangents, cotangents, subject.precision, padded),
        CHECK_FUNCTION,
        f"DTYPE = {'ml_dtypes.bfloat16' if case.dtype == 'bfloat16' else 'np.' + case.dtype}",
        f"mesh = Mesh(np.array(jax.devices('cpu')[:{split.world}]).reshape({split.data}, {split.sequence}), "
        "('data', 'sequence'))",
        "in_specs = (P('data', 'sequence'), P('data'), P('data', 'sequence'))",
        "inputs = [jax.device_put(x, NamedSharding(mesh, spec)) for x, spec in zip(",
        "    (TOKEN_LOG_PROBS.astype(DTYPE), ADVANTAGES.astype(DTYPE), TOKEN_MASK), in_specs)]",
    ]
    if plain:
        lines.append(f"fn = jax.jit({subject.function_name})")
    else:
        lines += [
            f"fn = jax.jit(jax.shard_map({subject.function_name}, mesh=mesh, in_specs=in_specs,",
            "    out_specs={'sequence_summed': P('data'), 'token_averaged': P('data'), 'magnitude_ratio': P()}))",
        ]
    lines.append("problems = []")
    if cotangents is None:
        lines += [
            "out = fn(*inputs)",
            "for key in ('sequence_summed', 'token_averaged', 'magnitude_ratio'):",
            "    if out[key].dtype != DTYPE:",
            "        problems.append(f'{key} has dtype {out[key].dtype}')",
            "    check(key, out[key], globals()['EXPECTED_' + key.upper()], globals()['TOLERANCE_' + key.upper()], "
            "problems)",
        ]
    else:
        lines += [
            "out, pullback = jax.vjp(lambda lp, adv: fn(lp, adv, inputs[2]), inputs[0], inputs[1])",
            "d_log_probs, d_advantages = pullback({k: globals()['COTANGENT_' + k.upper()].astype(v.dtype)",
            "                                      for k, v in out.items()})",
            "check('d token_log_probs', d_log_probs, EXPECTED_D_LOG_PROBS, TOLERANCE_D_LOG_PROBS, problems)",
            "check('d advantages', d_advantages, EXPECTED_D_ADVANTAGES, TOLERANCE_D_ADVANTAGES, problems)",
        ]
    lines.append("assert not problems, '\\n'.join(problems)")
    return "\n".join(line for line in lines if line is not None) + "\n"


def render_sharded_snippet(task: object, subject: Subject, case: Case, split: Split,
                           cotangents: dict[str, np.ndarray] | None, failures: list[str]) -> str:
    """The snippet for a failing sharded example of `task` (a fuzz.sharded.cells.ShardedTask)."""
    engine = task.engine  # type: ignore[attr-defined]
    if engine == "torch":
        return _torch_snippet(subject, case, split, cotangents, failures)
    return _jax_snippet(subject, case, split, cotangents, failures, plain=engine == "jax-plain")
