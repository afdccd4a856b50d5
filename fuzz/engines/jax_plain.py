"""The plain-jit engine: a single-process function under `jax.jit` with its inputs sharded over the mesh
(`NamedSharding` with the contract's partition specs). XLA partitions it, and it must still give the exact
results: the "sharded inputs" rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzz.engines.jax_worker import JaxWorkerEngine
from fuzz.engines.split import Split
from reference.case import Case
from reference.contract import Contract


class JaxPlain(JaxWorkerEngine):
    name = "jax-plain"
    kind = "sharded inputs"
    gradients = False  # the forward shows XLA's partitioning; jax-jit's own gradient cells check its backward

    def mapped(self, fn: Any, mesh: Any, contract: Contract) -> Any:
        return fn  # as it is: XLA partitions it from the inputs' shardings

    def snippet(self, subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        from fuzz.engines.snippets import jax_snippet

        return jax_snippet(subject, case, split, cotangents, failures, plain=True)


ENGINE = JaxPlain()
