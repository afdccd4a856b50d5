"""A worker process with host-platform CPU devices for the JAX engines (fuzz/engines/jax_mesh.py, jax_plain.py,
jax_accumulation.py).

JAX fixes its device count when it initializes, from XLA_FLAGS=--xla_force_host_platform_device_count=N,
so the sharded JAX runs need a process of their own: this one is spawned with that flag, and it is kept
alive across examples and cells. Each job is one padded global case (see fuzz/engines/split.py) on a mesh
("data", "sequence"), its inputs placed with the contract's partition specs (`Input.mesh`); the job's engine
says how the function runs there (`engine.mapped(fn, mesh, contract)`: under shard_map, or as it is), always
under jax.jit, and for gradients under jax.vjp of that global function, with global cotangents.

Deadlines and deaths are handled as for torch ranks: a worker that dies or hangs raises RankFailure.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
import traceback
from typing import Any

import numpy as np

from fuzz.engines.freshness import IMPORTED, ImportedFiles
from fuzz.engines.registry import Engine
from fuzz.engines.split import Split, pad_for_shard_map, padding_fill
from fuzz.engines.torch_ranks import START_TIMEOUT_S, RankFailure, rank_timeout
from fuzz.judge.verdict import Verdict
from fuzz.run.processes import DidNotStart, died_at_start, slow_to_start, suite_process_name
from reference.case import Case

DEVICES = 4  # the largest mesh has 4 devices
JAX_MESH_PROCESS = "the JAX mesh process"  # the engines' worker_setup: `jax_worker()`'s process, kept per worker


def shard_map_function() -> Any:
    """jax.shard_map, or jax.experimental.shard_map.shard_map on older JAX."""
    import jax

    if hasattr(jax, "shard_map"):
        return jax.shard_map
    from jax.experimental.shard_map import shard_map

    return shard_map


# ---------------------------------------------------------------------------------------------- worker side

class _Runner:
    def __init__(self) -> None:
        import jax

        self.jax = jax  # x64 only while a float64 case runs: the adapter's scope, in run()
        self.functions: dict[Any, Any] = {}
        self.compiled: dict[Any, Any] = {}

    def mesh(self, shape: tuple[int, int]) -> Any:
        import numpy as np
        from jax.sharding import Mesh

        devices = np.array(self.jax.devices("cpu")[: shape[0] * shape[1]]).reshape(shape)
        return Mesh(devices, ("data", "sequence"))

    def function(self, subject: tuple[str, str], contract: Any) -> Any:
        if (subject, contract) not in self.functions:
            from fuzz.engines.torch_ranks import resolve

            self.functions[(subject, contract)] = resolve(subject, contract)
        return self.functions[(subject, contract)]

    def callables(self, subject: tuple[str, str], engine: str, shape: tuple[int, int],
                  contract: Any) -> tuple[Any, Any]:
        """(forward, forward-and-VJP), both jitted, built once per (function, engine, mesh, contract)."""
        key = (subject, engine, shape, contract)
        if key not in self.compiled:
            from fuzz.engines.registry import engine_named
            from impls.frameworks import load_framework

            mapped = engine_named(engine).mapped(self.function(subject, contract), self.mesh(shape), contract)
            adapter = load_framework("jax")
            self.compiled[key] = (self.jax.jit(mapped), lambda inputs, cotangents: adapter.vjp(mapped, inputs,
                                                                                                cotangents, contract))
        return self.compiled[key]

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        from fuzz.engines.replies import rank_reply
        from fuzz.engines.torch_ranks import LOAD_FAILED
        from fuzz.judge.verdict import Failure, call_safely, named_by_forward_alone
        from impls.frameworks import load_framework

        if "runner" in job:  # another engine's job (fuzz/engines/jax_accumulation.py): its own function, given this
            module, name = job["runner"]  # runner for its meshes and caches
            return getattr(importlib.import_module(module), name)(job, self)
        adapter = load_framework("jax")
        case, cotangents = job["case"], job.get("cotangents")
        try:
            forward, backward = self.callables(job["subject"], job["engine"], job["mesh"], case.contract)
        except Exception as error:
            return {"failures": [Failure(LOAD_FAILED, f"cannot load the function: {type(error).__name__}: {error}")],
                    "traceback": traceback.format_exc()}
        with adapter.scope(case):  # float64 cases under x64, the others under JAX's defaults
            mesh = self.mesh(job["mesh"])
            inputs = sharded_inputs(adapter, case, mesh)
            result, verdict = (call_safely(forward, *inputs) if cotangents is None
                               else call_safely(backward, inputs, cotangents))
            if cotangents is not None and not verdict.ok:  # one process: the forward can run alone on the mesh
                verdict = named_by_forward_alone(verdict, self.function(job["subject"], case.contract),
                                                 lambda: call_safely(forward, *inputs)[1])
            return rank_reply(adapter, case, verdict, result, cotangents is not None)


def sharded_inputs(adapter: Any, case: Any, mesh: Any) -> tuple[Any, ...]:
    """The case's inputs on the mesh, each split as its contract input's `mesh` spec says, put on the shards
    straight from the host: an array already on one device would be sliced for its shards by a program XLA
    compiles for each new shape."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    return tuple(jax.device_put(value, NamedSharding(mesh, P(*spec.mesh)))
                 for value, spec in zip(adapter.host_values(case), case.contract.inputs))


def _worker_main(connection: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as torch's ranks: the parent ends this daemon on a Ctrl-C
    # Before JAX initializes: it reads the device count once.
    # its own count: any other (the parent's, for the single-process "cpu:1" cells) is replaced
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
             if not flag.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={DEVICES}"])
    runner = _Runner()
    imported = ImportedFiles()
    connection.send("ready" if len(runner.jax.devices("cpu")) >= DEVICES
                    else f"only {len(runner.jax.devices('cpu'))} CPU devices")
    while True:
        try:
            message = connection.recv()
        except EOFError:
            break
        if message[0] == "stop":
            break
        try:
            reply = runner.run(message[1])
        except Exception as error:
            reply = {"internal": f"{type(error).__name__}: {error}\n{traceback.format_exc()}"}
        reply[IMPORTED] = imported.new()
        connection.send(reply)


# -------------------------------------------------------------------------------------------- parent side

class JaxWorker:
    def __init__(self) -> None:
        self.broken: str | None = None
        self.imported = ImportedFiles()  # the user's files it imported (fuzz/engines/freshness.py)
        context = multiprocessing.get_context("spawn")
        self.connection, child_end = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child_end,), name=suite_process_name("jax-mesh"),
                                       daemon=True)
        self.process.start()
        child_end.close()
        try:  # a failure here is the harness's (no user code has run yet)
            reply = self._receive(START_TIMEOUT_S, "start")
        except RankFailure as error:
            raise DidNotStart(f"the JAX mesh worker did not start: {error}") from error
        if reply != "ready":
            self.close()
            raise DidNotStart(f"the JAX mesh worker did not start: {reply}")

    def _receive(self, timeout: float, doing: str) -> Any:
        deadline = time.monotonic() + timeout
        ready = multiprocessing.connection.wait([self.connection, self.process.sentinel], timeout=timeout)
        if self.connection in ready:
            try:
                return self.connection.recv()
            except (EOFError, OSError):
                pass
        if ready:
            self.process.join(5)
            if doing == "start":
                self._fail(died_at_start("the JAX mesh worker", self.process.exitcode))
            self._fail(f"the JAX mesh worker died during {doing} (exit code {self.process.exitcode}: os._exit, "
                       "a crash or a kill)")
        del deadline
        if doing == "start":
            self._fail(slow_to_start("the JAX mesh worker", timeout, "JAX"))
        self._fail(f"the JAX mesh worker did not answer within {timeout:g} s during {doing}: it hangs "
                   "(a sleep, a deadlock or a callback that never returns)")

    def _fail(self, message: str) -> None:
        self.broken = message
        self.close()
        raise RankFailure(message)

    def run(self, job: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if self.broken:
            raise RankFailure(self.broken)
        with contextlib.suppress(BrokenPipeError, OSError):  # a dead worker shows in _receive
            self.connection.send(("run", job))
        # The first call of each shape compiles: allow for it on top of the per-example deadline.
        reply = self._receive((rank_timeout() if timeout is None else timeout) + 60, "an example")
        self.imported.add(reply.pop(IMPORTED, {}))
        if "internal" in reply:
            self.close()
            raise RuntimeError(f"the harness failed in the JAX mesh worker: {reply['internal']}")
        return reply

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.send(("stop",))
        self.process.join(0.5 if self.broken is None else 0)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.connection.close()


_WORKER: list[JaxWorker] = []


def jax_worker() -> JaxWorker:
    """The live JAX mesh worker of this process, started if there is none (or the last one broke, or runs a user's
    file as it was before an edit)."""
    if _WORKER and not _WORKER[0].broken and _WORKER[0].imported.changed():
        _WORKER[0].close()
        _WORKER.clear()
    if not _WORKER or _WORKER[0].broken or not _WORKER[0].process.is_alive():
        _WORKER[:] = [JaxWorker()]
    return _WORKER[0]


@atexit.register
def close_worker() -> None:
    for worker in _WORKER:
        if not worker.broken:
            worker.close()
    _WORKER.clear()


# ----------------------------------------------------------------------------------------- the JAX engines

class JaxWorkerEngine(Engine):
    """What the two JAX engines share: one padded global case per example, run in the mesh worker, the real rows
    and tokens cut out and judged. Subclasses say how the function runs on the mesh (`mapped`)."""

    framework = "jax"
    padded = True
    compiles = True
    worker_setup = JAX_MESH_PROCESS

    def mapped(self, fn: Any, mesh: Any, contract: Any) -> Any:
        """The global function the worker jits: in the worker process, with JAX imported."""
        raise NotImplementedError

    def fit(self, subject: Any, case: Case, split: Split) -> tuple[Case, Split]:
        """The case as drawn, which the padding changes nothing in; where fully masked rows count in the outputs
        (a reduction's D of every row), the padded batch itself, on even shards: a per-shard function cannot tell
        a padded row from an empty one, so the batch it is judged on is the one it is given."""
        if not case.contract.empty_rows_count:
            return case, split
        padded = pad_for_shard_map(case, split, padding_fill(subject.masked_values))
        rows, tokens = padded.case.shape
        story = (("padded for shard_map", f"{rows} x {tokens}, fully masked rows counted in D"),)
        return padded.case.with_(story=padded.case.story + story), split.evenly(rows, tokens)

    def run(self, subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
            exact: Any) -> Verdict:
        from fuzz.engines.judge import compare_gradients, cut_padded_gradients, judge_padded_forward, rank_failures
        from fuzz.engines.split import pad_cotangents

        padded = pad_for_shard_map(case, split, padding_fill(subject.masked_values))
        job: dict[str, Any] = {"subject": subject.key, "engine": self.name, "mesh": split.mesh, "case": padded.case}
        if cotangents is not None:
            job["cotangents"] = pad_cotangents(padded, cotangents)  # padded rows: 0 (their gradients are 0 anyway)
        reply = jax_worker().run(job)
        if cotangents is None:
            return judge_padded_forward(case, padded, split, reply, subject.precision)
        verdict = rank_failures([reply], lambda rank: "the mesh")
        if "gradients" in reply:
            gradients, cut = cut_padded_gradients(case, padded, reply["gradients"])
            verdict.merge(cut)
            if gradients:
                verdict.merge(compare_gradients(case, gradients, exact, cotangents, subject.precision))
        return verdict
