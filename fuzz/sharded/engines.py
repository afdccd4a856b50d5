"""The sharded engines, one module each, found by name: the ranks or mesh a per-rank function runs on, and
everything specific to it (launching, the calling convention, gathering replies, the snippet that
reproduces a failure). The cells (fuzz/sharded/cell.py) and the plan (fuzz/sharded/plan.py) ask an engine,
and never which one it is. Nothing here imports a framework at module level."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np

from fuzz.judge.verdict import Verdict
from fuzz.sharded.split import MESHES, Split, mesh_name
from reference.case import Case

# --sharded choice or plan name -> the module defining ENGINE
MODULES = {"torch": "fuzz.sharded.torch_ranks", "jax": "fuzz.sharded.jax_mesh", "jax-plain": "fuzz.sharded.jax_plain"}
CHOICES = ("torch", "jax")  # `check --sharded`: the engines that run a user's per-rank function


class Engine:
    """What every engine answers."""

    name = ""
    framework = ""  # the adapter of its arrays
    kind = "sharded"  # the matrix row's word: "sharded", or "sharded inputs" for a plain jit of sharded inputs
    padded = False  # shards padded to equal sizes (shard_map needs them)
    replicas_sum_cotangents = False  # each replica of an output receives its cotangent (torch.distributed)
    gradients = True  # the campaign checks gradients on it

    def row(self, mesh: tuple[int, int] | None, check: str) -> str:
        return f"{self.kind} {mesh_name(mesh or (1, 1))}" + (" gradients" if check == "gradients" else "")

    def devices(self) -> list[str]:
        return ["cpu"]

    def meshes(self, device: str) -> tuple[tuple[int, int], ...]:
        return MESHES

    def run(self, subject_key: tuple[str, str], case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
            precision: Any) -> tuple[dict[str, np.ndarray] | None, Verdict]:
        """One example on the ranks: (gathered gradients or None, the verdict so far). The forward's values are
        judged here; gradients are compared by the caller against the exact VJP."""
        raise NotImplementedError

    def snippet(self, subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        """A script that launches the ranks itself and fails while the bug is there."""
        raise NotImplementedError


@functools.cache
def engine_named(name: str) -> Engine:
    if name not in MODULES:
        raise ValueError(f"unknown sharded engine {name!r}; the engines are {', '.join(MODULES)}")
    return importlib.import_module(MODULES[name]).ENGINE
