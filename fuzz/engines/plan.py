"""The sharded cells of a run: for a per-rank function (`check --sharded`) or the campaign's sharded
built-ins, one cell per (mesh, device, check, dtype), each mesh drawing cases of its own."""

from __future__ import annotations

from collections.abc import Sequence

from fuzz.engines.registry import engine_named
from fuzz.run.plan import CellTask
from fuzz.run.subjects import SubjectSpec

# `check --sharded` without --max-examples: examples per (mesh, dtype) cell. Six meshes make it 60 examples
# per dtype (gradients: half), against 40 for a single-process check.
DEFAULT_EXAMPLES = 10


def mesh_seed(seed: int, mesh: tuple[int, int]) -> int:
    """The Hypothesis seed of a mesh's cells: each mesh draws cases of its own (with `seed` for every mesh, the
    six meshes of a dtype would run the same cases). Still a function of `seed` alone (distinct for distinct
    seeds and meshes, as meshes have at most 9 data and 9 sequence ranks), so a run repeats."""
    data, sequence = mesh
    return seed * 100 + data * 10 + sequence


def plan_sharded_cells(spec: SubjectSpec, engine_name: str, dtypes: Sequence[str], devices: Sequence[str] | None,
                       examples: int, seed: int, gradients: bool, gradient_examples: int) -> list[CellTask]:
    """Every (mesh, device, check, dtype) cell of one subject on one engine; forward cells first."""
    engine = engine_named(engine_name)
    checks = [("forward", examples)] + ([("gradients", gradient_examples)] if gradients else [])
    return [CellTask(spec, device, dtype, check, count, mesh_seed(seed, mesh), engine.name, mesh)
            for check, count in checks
            for device in engine.devices(spec) if devices is None or device in devices
            for mesh in engine.shapes(device)
            for dtype in dtypes]
