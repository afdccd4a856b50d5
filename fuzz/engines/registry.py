"""The sharded engines, one module each, found by name: the ranks or mesh a per-rank function runs on, and
everything specific to it (launching, the calling convention, gathering replies, the snippet that
reproduces a failure). The cells (fuzz/engines/cell.py) and the plan (fuzz/engines/plan.py) ask an engine,
and never which one it is. Nothing here imports a framework at module level."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np

from fuzz.engines.split import MESHES, draw_split, mesh_name
from fuzz.judge.draws import Draw
from fuzz.judge.verdict import Verdict
from reference.case import Case

# engine name -> the module defining ENGINE
MODULES = {"torch": "fuzz.engines.torch_ranks", "jax": "fuzz.engines.jax_mesh", "jax-plain": "fuzz.engines.jax_plain",
           "accumulation": "fuzz.engines.accumulation", "ddp": "fuzz.engines.torch_ddp",
           "jax-accumulation": "fuzz.engines.jax_accumulation"}
# `check --accumulation --ranks`: the rank engine of each framework (torch DDP, or JAX shard_map)
RANKS_ENGINES = {"torch": "ddp", "jax": "jax-accumulation"}
CHOICES = ("torch", "jax")  # `check --sharded`: the engines that run a user's per-rank function


def rank_signature(contract: Any, keywords: tuple[str, ...]) -> str:
    """How a function is called with the contract's inputs and `keywords` besides them, as text."""
    inputs = ", ".join(contract.input_names)
    return f"fn({inputs}, *, {', '.join(keywords)})" if keywords else f"fn({inputs})"


def rank_call(framework: str, contract: Any) -> tuple[tuple[str, ...], str]:
    """What a rank form on `framework`'s ranks is called with besides its inputs, and the call as text."""
    return engine_call(RANKS_ENGINES[framework], contract)


def engine_call(engine: str, contract: Any) -> tuple[tuple[str, ...], str]:
    """What engine `engine` calls a user's function with besides its inputs (`check --sharded ENGINE`'s per-rank
    function, `--ranks`' rank form), and the call as text."""
    module = importlib.import_module(MODULES[engine])
    return module.RANK_KEYWORDS, rank_signature(contract, module.RANK_KEYWORDS)


class Engine:
    """What every engine answers. A cell runs on one `shape` of the engine's (a mesh (data, sequence), or (R, G)
    ranks and micro-batches); each example draws a split of its case over it (`draw_split`) and `run`s it."""

    name = ""
    framework = ""  # the adapter of its arrays ("" for an engine that takes the subject's own framework)
    kind = "sharded"  # the matrix row's word: "sharded", "sharded inputs", "micro-batches"
    runs_on = ""  # a rank form's engine: how its ranks run, in words, for a check's heading
    padded = False  # shards padded to equal sizes (shard_map needs them)
    replicas_sum_cotangents = False  # each replica of an output receives its cotangent (torch.distributed)
    gradients = True  # the campaign checks gradients on it
    in_process = False  # the function runs in this process (a subject built as `check` builds it), not on ranks
    compiles = False  # on ranks, it runs the function compiled (shard_map under jit): as a compiled subject's cells
    campaign_examples = 6  # examples per campaign cell: a split's round trip to its ranks costs tens of ms
    # What a worker process starts for this engine's cells and keeps for the next ones (a pool of torch ranks, the
    # JAX mesh process): engines that name the same share it, and run_cells gives their cells to the worker that
    # started it. "" for none.
    worker_setup = ""

    def row(self, shape: tuple[int, int] | None, check: str) -> str:
        return f"{self.kind} {mesh_name(shape or (1, 1))}" + (" gradients" if check == "gradients" else "")

    def devices(self, spec: Any) -> list[str]:
        """The devices it runs `spec`'s subject on (a SubjectSpec)."""
        return ["cpu"]

    def shapes(self, device: str) -> tuple[tuple[int, int], ...]:
        return MESHES

    def draw_split(self, draw: Draw, case: Case, shape: tuple[int, int]) -> tuple[Case, Any]:
        """The case (perhaps changed: a shard's mask cleared) and a split of it over `shape`, drawn with labels."""
        return draw_split(draw, case, [shape])

    def fit(self, subject: Any, case: Case, split: Any) -> tuple[Case, Any]:
        """The case and split as the subject's framework is given them (by default, as drawn)."""
        return case, split

    def telling_split(self, subject: Any, case: Case, chunks: Any) -> tuple[Case, Any] | None:
        """`case` (the fixed case of rows of different counts) and `chunks`, an uneven split of it into a step's
        chunks (fuzz.engines.chunks.uneven_chunks) where the usual mistakes of a combination give different values,
        as this engine runs them; None where the engine's splits are not a step's chunks."""
        return None

    def exact_cotangents(self, case: Case, cotangents: dict[str, np.ndarray], split: Any) -> dict[str, np.ndarray]:
        """The cotangents the exact VJP is taken with (summed over replicas where each replica receives one)."""
        return cotangents

    def run(self, subject: Any, case: Case, split: Any, cotangents: dict[str, np.ndarray] | None,
            exact: Any) -> Verdict:
        """One example: the split run on the engine, every output and gradient judged; `exact` is the exact VJP of
        the cotangents (None forward). `subject` is the cell's (its key finds the function on ranks)."""
        raise NotImplementedError

    def snippet(self, subject: Any, case: Case, split: Any, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        """A script that reproduces the failure on its own (launching its ranks) and fails while the bug is there."""
        raise NotImplementedError


@functools.cache
def engine_named(name: str) -> Engine:
    if name not in MODULES:
        raise ValueError(f"unknown sharded engine {name!r}; the engines are {', '.join(MODULES)}")
    return importlib.import_module(MODULES[name]).ENGINE
