"""`python -m fuzz check TARGET --sharded torch|jax`, and the campaign's sharded rows.

The same report, JSON and exit codes as `check` (0 conforms, 1 counterexample, 2 usage or load error,
3 the fuzzer failed). Cells run one after another in this process: each torch cell already runs
data x sequence rank processes, and the JAX cells run in one worker with 4 host devices; --jobs does not
apply.
"""

from __future__ import annotations

import argparse
import sys
import time

from fuzz.campaign import CellResult
from fuzz.loader import LoadError, load_target
from fuzz.sharded.cells import ShardedTask, plan_sharded_cells, run_sharded_cells
from fuzz.sharded.split import MESHES
from reference.tolerance import CONTRACT

# `check --sharded` without --max-examples: examples per (mesh, dtype) cell. Six meshes make it 60 examples
# per dtype (gradients: half), against 40 for a single-process check.
DEFAULT_EXAMPLES = 10
# The campaign's sharded rows: a few examples per (mesh, dtype) cell, so they add little to the run.
CAMPAIGN_EXAMPLES = 3
ENGINE_OF_BUILTIN = {"torch-distributed": "torch", "jax-shard-map": "jax"}


def engine_devices(engine: str) -> list[str]:
    """torch: cpu (gloo), and cuda (NCCL) where there is a GPU; JAX meshes are host CPU devices."""
    if engine == "torch":
        import torch

        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    return ["cpu"]


def _meshes(engine: str, device: str) -> tuple[tuple[int, int], ...]:
    """NCCL needs a GPU per rank: on CUDA only the meshes that fit the GPUs there are."""
    if device != "cuda":
        return MESHES
    import torch

    return tuple(mesh for mesh in MESHES if mesh[0] * mesh[1] <= torch.cuda.device_count())


def plan(name: str, engine: str, args: argparse.Namespace, examples: int, gradient_examples: int,
         builtin: bool) -> list[ShardedTask]:
    tasks = []
    for device in engine_devices(engine):
        if args.devices is not None and device not in args.devices:
            continue
        tasks += plan_sharded_cells(name, engine, args.dtypes, [device], examples, args.seed, args.gradients,
                                    gradient_examples, builtin=builtin, meshes=_meshes(engine, device),
                                    precision=getattr(args, "precision", CONTRACT.name))  # campaigns: built-ins only
    return tasks


def campaign_cells(names: list[str], args: argparse.Namespace) -> list[CellResult]:
    """The campaign's sharded rows for the sharded built-ins in `names`, forward and (unless --no-gradients)
    gradients, every mesh and dtype; jax-shard-map brings the jax-jit row with sharded inputs too."""
    examples = min(args.max_examples, CAMPAIGN_EXAMPLES)
    tasks = []
    for name in names:
        engine = ENGINE_OF_BUILTIN[name]
        tasks += plan(name, engine, args, examples, examples, builtin=True)
        if engine == "jax":
            plain = argparse.Namespace(**{**vars(args), "gradients": False})
            tasks += plan("jax-jit", "jax-plain", plain, examples, examples, builtin=True)
    return run_sharded_cells(tasks)


def run_sharded_check(args: argparse.Namespace, default_examples: bool = False) -> list[CellResult]:
    """The cells of a parsed `check --sharded`; raises LoadError when the target does not load.
    `default_examples`: --max-examples was not given, so DEFAULT_EXAMPLES per cell."""
    from fuzz.cells import available_adapter
    from fuzz.cli import _gradient_examples

    if default_examples:
        args.max_examples = DEFAULT_EXAMPLES
    available_adapter("torch" if args.sharded == "torch" else "jax")  # a clear LoadError before any rank starts
    load_target(args.target)
    tasks = plan(args.target, args.sharded, args, args.max_examples, _gradient_examples(args), builtin=False)
    if not tasks:
        from fuzz.cli import no_matching_device

        meshes = {f"{args.sharded} meshes": engine_devices(args.sharded)}
        raise LoadError(no_matching_device(args.devices or [], meshes))
    return run_sharded_cells(tasks, fail_fast=args.fail_fast)


def sharded_check(args: argparse.Namespace, default_examples: bool = False) -> int:
    """`check --sharded`: exit 2 if the target does not load, else fuzz every cell and report."""
    from fuzz.cli import _finish

    started = time.perf_counter()
    try:
        results = run_sharded_check(args, default_examples)
    except LoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    print(f"\n{args.target} (sharded over {args.sharded} meshes), {elapsed:.0f} s")
    return _finish(results, args, {}, {"command": "check", "target": args.target, "sharded": args.sharded,
                                       "seconds": elapsed, "seed": args.seed})
