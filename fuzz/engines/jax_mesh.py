"""The JAX mesh engine: the per-shard body `fn(*its inputs)` under

    jax.jit(jax.shard_map(fn, mesh=Mesh(devices, ("data", "sequence")), in_specs=..., out_specs=...))

with the contract's partition specs (`Input.mesh`; per-row outputs split over "data", scalars replicated),
reducing with `lax.psum` over the axis names. shard_map's replication check (`check_vma`, on) proves the
outputs replicated as out_specs say. Run in the mesh worker (fuzz/engines/jax_worker.py) on padded shards."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzz.engines.jax_worker import JaxWorkerEngine, shard_map_function
from fuzz.engines.split import Split
from reference.case import Case
from reference.contract import Contract

RANK_KEYWORDS: tuple[str, ...] = ()  # the body takes its inputs alone: the axis names are the mesh's


def out_specs(contract: Contract) -> Any:
    """The out_specs of shard_map, as Python values (in the worker) for the contract's outputs."""
    from jax.sharding import PartitionSpec as P

    specs = {spec.name: P(*("data" for dim in spec.dims if dim == "batch")) for spec in contract.outputs}
    return specs if contract.returns_mapping else specs[contract.outputs[0].name]


class JaxMesh(JaxWorkerEngine):
    name = "jax"

    def mapped(self, fn: Any, mesh: Any, contract: Contract) -> Any:
        from jax.sharding import PartitionSpec as P

        in_specs = tuple(P(*spec.mesh) for spec in contract.inputs)
        return shard_map_function()(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs(contract))

    def snippet(self, subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        from fuzz.engines.snippets import jax_snippet

        return jax_snippet(subject, case, split, cotangents, failures, plain=False)


ENGINE = JaxMesh()
