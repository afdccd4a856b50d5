"""Which worker runs which cell: cells whose engine keeps a per-process setup (a pool of torch ranks, the JAX mesh
process) go to the worker that started it, without leaving another worker idle."""

from __future__ import annotations

from collections import deque

from fuzz.engines.jax_worker import JAX_MESH_PROCESS as MESH
from fuzz.engines.registry import engine_named
from fuzz.engines.torch_ranks import TORCH_RANK_POOLS as RANKS
from fuzz.run.workers import _take


def test_engines_that_share_a_process_setup_name_the_same_one():
    assert engine_named("torch").worker_setup == engine_named("ddp").worker_setup == RANKS
    assert engine_named("jax").worker_setup == engine_named("jax-plain").worker_setup == MESH
    assert engine_named("jax-accumulation").worker_setup == MESH
    assert RANKS != MESH
    assert engine_named("accumulation").worker_setup == ""  # micro-batches in the worker's own process


def test_a_worker_keeps_the_cells_of_the_setup_it_started_and_the_other_takes_the_rest():
    setups = [RANKS, RANKS, "", RANKS, MESH, "", MESH]
    pending = deque(range(len(setups)))
    first, second = object(), object()
    holders: dict = {}
    assert _take(pending, setups, first, holders) == 0  # starts the rank pools: they are its from now on
    assert holders == {RANKS: first}
    assert _take(pending, setups, second, holders) == 2  # skips the rank cells, in priority order
    assert _take(pending, setups, second, holders) == 4  # starts the mesh process
    assert _take(pending, setups, first, holders) == 1
    assert _take(pending, setups, first, holders) == 3
    assert _take(pending, setups, first, holders) == 5  # nothing of its own left: the next cell without a setup
    assert list(pending) == [6]


def test_a_worker_with_nothing_else_left_takes_another_workers_cell_rather_than_wait():
    setups = [RANKS, RANKS]
    pending = deque(range(2))
    first, second = object(), object()
    holders: dict = {}
    assert _take(pending, setups, first, holders) == 0
    assert _take(pending, setups, second, holders) == 1
    assert holders == {RANKS: first} and not pending
