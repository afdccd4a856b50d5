"""The torch.distributed engine: a pool of rank processes, started once and kept alive across examples and
cells, the per-rank calling convention (`fn(*inputs, data_group=..., sequence_group=...)`), and the snippet
that launches its own ranks.

A pool has a fixed world size (1, 2 or 4) and serves every mesh of that size: at start every rank creates
the data and sequence groups of each such mesh (new_group must be called by every rank, in one order).
The default group is the whole pool, so a per-rank function may reduce over every rank of the mesh with
group=None. Ranks use gloo on 127.0.0.1 (NCCL when the cells run on CUDA) and receive one job per example over
a pipe. They are forked from multiprocessing's fork server, a fresh single-threaded process that imports torch
once, never from the parent (which may hold threads): each rank of a pool then starts in milliseconds, where a
spawned one imports torch again (a 4-rank pool: about 1.3 s instead of 5.6 s on a 2-core machine).

Every call has a deadline. A rank that dies (a crash, os._exit) or does not answer in time (a sleep, a
deadlock, a collective the other ranks never join) breaks the pool: all its ranks are terminated and the
call raises RankFailure with a message naming the rank; the next call needs a new pool. An exception
raised by the function on a rank is that rank's reply, not a broken pool; after such an example the ranks
pass a barrier, so a rank left inside a collective shows up as a hang there and then.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from fuzz.engines.freshness import IMPORTED, ImportedFiles
from fuzz.engines.registry import Engine
from fuzz.engines.split import MESHES, Split
from fuzz.judge.verdict import Verdict
from fuzz.run.processes import DidNotStart, died_at_start, fork_server_context, slow_to_start, suite_process_name
from impls.frameworks import adapter_class
from reference.case import Case

DEFAULT_TIMEOUT_S = 60.0  # per example; a correct example takes milliseconds, a cold start seconds
# After one rank's call raised (or its step stopped on a failure), how long the others may still take: one still
# silent then waits for it in a collective it never joins, and the example has failed already, so waiting out the
# whole deadline (once per cell and dtype) would tell nothing more.
FAILED_RANK_GRACE_S = 3.0
EXAMPLE = "an example"
START_TIMEOUT_S = 180.0  # spawning ranks imports torch in each; slow on a loaded 2-core machine
TIMEOUT_VARIABLE = "LOSSNORM_RANK_TIMEOUT"


def _failures(reply: Any) -> list[Any]:
    """A rank's reply's failures (none for a reply that is not an example's)."""
    return list(reply.get("failures") or []) if isinstance(reply, dict) else []


LEFT_EARLY = "left early"  # a reply's key: the runner stopped the rank's step on a failure (fuzz/engines/torch_ddp.py)


def _stopped(reply: Any) -> bool:
    """Whether the rank that sent `reply` stopped short of its step's collectives: the function raised there (its
    traceback came with it), or the runner broke off its step on a failure (a DDP rank whose loss carries no
    gradient runs no backward, and DDP's all-reduce waits for it). A rank that merely returned something wrong
    still makes every collective the others wait in."""
    if not isinstance(reply, dict) or not reply.get("failures"):
        return False
    return bool(reply.get("traceback")) or bool(reply.get(LEFT_EARLY))


def rank_timeout() -> float:
    """Seconds a rank may take for one example: $LOSSNORM_RANK_TIMEOUT, else DEFAULT_TIMEOUT_S."""
    return float(os.environ.get(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT_S))


class RankFailure(Exception):
    """A rank died or hung: the pool is gone, and the message says which rank and how. Where it hung waiting for
    another rank whose call failed, `failures` and `traceback` are that rank's own (the example's failure)."""

    def __init__(self, message: str, failures: Sequence[Any] = (), traceback: str | None = None) -> None:
        super().__init__(message)
        self.failures, self.traceback = list(failures), traceback


# What the fork server imports before it forks ranks: torch (a CUDA context is not made by importing it, so the
# ranks may still pick their GPU), what a rank's first backward imports (torch's adapter's modules: autograd's
# symbolic shapes) and this module, whose `_rank_main` every rank runs.
RANK_PRELOAD = (*adapter_class("torch").modules, "torch.distributed", __name__)


def rank_context() -> Any:
    """Ranks fork from a server that imported RANK_PRELOAD (fuzz/run/processes.py)."""
    return fork_server_context(RANK_PRELOAD)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- rank side

@functools.cache  # once per rank process: a file TARGET is executed once, as in a trainer (failures are not cached)
def _load(subject: tuple[str, str]) -> Any:
    kind, name = subject
    if kind == "builtin":
        from impls.registry import get_implementation

        contract, _, builtin = name.partition(":")
        return get_implementation(builtin, contract)
    from fuzz.loader import load_target

    return load_target(name).function


def resolve(subject: tuple[str, str], contract: Any) -> Any:
    """The function a job names, for its case's contract: ("builtin", "contract:name") from the registry, bound to
    the contract's declared parameters, or ("target", "path.py:function") as it is."""
    loaded = _load(subject)
    return loaded.function_for(contract) if subject[0] == "builtin" else loaded


LOAD_FAILED = "function does not load on the ranks"


def _run_job(job: dict[str, Any], groups: dict[tuple[int, int], tuple[Any, Any]], rank: int) -> dict[str, Any]:
    """One example on this rank: the forward pass (checked for structure and unchanged inputs), or the VJP."""
    from fuzz.engines.replies import rank_reply
    from fuzz.judge.outputs import modified_inputs
    from fuzz.judge.verdict import Failure, all_backward, call_safely
    from impls.frameworks import load_framework

    adapter = load_framework("torch")
    try:
        fn = resolve(job["subject"], job["case"].contract)
    except Exception as error:
        return {"failures": [Failure(LOAD_FAILED, f"cannot load the function on the rank: "
                                                  f"{type(error).__name__}: {error}")],
                "traceback": traceback.format_exc()}
    data_group, sequence_group = groups[job["mesh"]]
    bound = functools.partial(fn, data_group=data_group, sequence_group=sequence_group)
    case, cotangents = job["case"], job.get("cotangents")
    inputs = adapter.materialize(case, requires_grad=cotangents is not None)
    snapshot = adapter.snapshot(inputs)
    result, verdict = (call_safely(bound, *inputs) if cotangents is None
                       else call_safely(adapter.vjp, bound, inputs, cotangents, case.contract))
    if cotangents is not None and not verdict.ok:
        # Named "backward" whatever raised it: telling a forward's exception apart means calling the function alone
        # (fuzz.judge.verdict.named_by_forward_alone), and on one rank alone that call's collectives could wait for
        # ranks that do not make it.
        verdict = all_backward(verdict)
    changes = modified_inputs(adapter, case, inputs, snapshot)
    return rank_reply(adapter, case, verdict, result, cotangents is not None, changes)


def _rank_main(rank: int, world: int, port: int, device: str, connection: Any) -> None:
    """A rank's life: join the process group, make every mesh's groups, then answer jobs until told to stop."""
    # A Ctrl-C reaches every process of the group: the parent ends the ranks (daemons), and a KeyboardInterrupt
    # in a call is then the function's own (call_safely).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # several ranks share a few cores
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=max(rank_timeout(), 30) * 4))
    groups: dict[tuple[int, int], tuple[Any, Any]] = {}
    for data, sequence in MESHES:
        if data * sequence != world:
            continue
        data_groups = [dist.new_group([d * sequence + q for d in range(data)]) for q in range(sequence)]
        sequence_groups = [dist.new_group([d * sequence + q for q in range(sequence)]) for d in range(data)]
        d, q = divmod(rank, sequence)
        groups[(data, sequence)] = (data_groups[q], sequence_groups[d])
    connection.send("ready")
    imported = ImportedFiles()
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the parent is gone
            break
        if message[0] == "stop":
            break
        if message[0] == "barrier":
            dist.barrier()
            connection.send("ok")
            continue
        try:
            job = message[1]
            runner = _run_job if "runner" not in job else getattr(importlib.import_module(job["runner"][0]),
                                                                   job["runner"][1])
            reply = runner(job, groups, rank)
        except Exception as error:  # the harness's own failure on this rank
            reply = {"internal": f"{type(error).__name__}: {error}\n{traceback.format_exc()}"}
        reply[IMPORTED] = imported.new()
        try:
            connection.send(reply)
        except (BrokenPipeError, OSError):  # the parent stopped waiting (--fail-fast, a closed pool): quietly end
            break
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


# -------------------------------------------------------------------------------------------- parent side

STARTING = "start (init_process_group and new_group)"


class RankPool:
    """`world` rank processes on one device type, ready for jobs; `run` sends one job to each rank."""

    def __init__(self, world: int, device: str = "cpu") -> None:
        """Start the ranks. A failure here is the harness's (no user code has run yet): DidNotStart, after one
        retry on a new port (another process may take the free port between its choice and its use)."""
        self.world, self.device = world, device
        self.broken: str | None = None
        self.imported = ImportedFiles()  # the user's files the ranks imported (fuzz/engines/freshness.py)
        for attempt in range(2):
            try:
                self._start()
                return
            except RankFailure as error:
                if attempt:
                    raise DidNotStart(f"torch.distributed ranks did not start: {error}") from error

    def _start(self) -> None:
        self.broken = None
        context = rank_context()
        port = _free_port()
        self.connections, self.processes = [], []
        for rank in range(self.world):
            parent_end, child_end = context.Pipe()
            process = context.Process(target=_rank_main, args=(rank, self.world, port, self.device, child_end),
                                      name=suite_process_name(f"rank-{rank}"), daemon=True)
            process.start()
            child_end.close()
            self.connections.append(parent_end)
            self.processes.append(process)
        replies = self._gather(START_TIMEOUT_S, STARTING, None)
        if any(reply != "ready" for reply in replies):
            self.close()
            raise DidNotStart(f"torch.distributed ranks did not start: {replies}")

    def _gather(self, timeout: float, doing: str, describe: Any) -> list[Any]:
        """Each rank's reply, waiting on the pipes and the processes together so that a death shows at once."""
        deadline = time.monotonic() + timeout
        replies: dict[int, Any] = {}
        failed: int | None = None  # the first rank that stopped short of its collectives, during an example
        grace = 0.0  # how long the others may take after it
        while len(replies) < self.world:
            waiting = [rank for rank in range(self.world) if rank not in replies]
            ready = multiprocessing.connection.wait(
                [self.connections[r] for r in waiting] + [self.processes[r].sentinel for r in waiting],
                timeout=max(0.0, deadline - time.monotonic()))
            for rank in waiting:
                if self.connections[rank] in ready:
                    try:
                        replies[rank] = self.connections[rank].recv()
                    except (EOFError, OSError):
                        pass
                    else:
                        if isinstance(replies[rank], dict):
                            self.imported.add(replies[rank].pop(IMPORTED, {}))
                        if doing == EXAMPLE and failed is None and _stopped(replies[rank]):
                            failed, grace = rank, min(FAILED_RANK_GRACE_S, max(0.0, deadline - time.monotonic()))
                            deadline = time.monotonic() + grace
                        continue
                if self.connections[rank] in ready or self.processes[rank].sentinel in ready:
                    self.processes[rank].join(5)
                    code = self.processes[rank].exitcode
                    if doing == STARTING:
                        self._fail(died_at_start(f"rank {rank} of {self.world}", code))
                    self._fail(f"{describe(rank) if describe else f'rank {rank}'} died during {doing} "
                               f"(exit code {code}: os._exit, a crash or a kill), after {len(replies)} of "
                               f"{self.world} ranks had answered")
            if not ready and time.monotonic() >= deadline and failed is not None:
                self._fail_after(failed, replies[failed], waiting, describe, grace)
            if not ready and time.monotonic() >= deadline:
                silent = ", ".join(describe(r) if describe else f"rank {r}" for r in waiting)
                if doing == STARTING:
                    self._fail(slow_to_start(silent, timeout, "torch"))
                # What the ranks that did answer said: often the cause (one rank raised, the others wait
                # for it in a collective).
                said = "; ".join(f"{describe(r) if describe else f'rank {r}'}: {failure}"
                                 for r, reply in sorted(replies.items()) for failure in _failures(reply)[:1])
                self._fail(f"{silent} did not answer within {timeout:g} s during {doing}: it hangs (a sleep, a "
                           f"deadlock, or a collective the other ranks never join); {len(replies)} of "
                           f"{self.world} ranks answered" + (f" ({said})" if said else ""))
        return [replies[rank] for rank in range(self.world)]

    def _fail(self, message: str, failures: Sequence[Any] = (), traceback: str | None = None) -> None:
        self.broken = message
        self.close()
        raise RankFailure(message, failures, traceback)

    def _fail_after(self, failed: int, reply: dict[str, Any], waiting: list[int], describe: Any,
                    grace: float) -> None:
        """The example's failure is `failed`'s own; the ranks still `waiting` wait for it in a collective it never
        joins: the pool is closed (the next example starts a new one)."""
        from fuzz.judge.verdict import Failure

        name = describe(failed) if describe else f"rank {failed}"
        silent = ", ".join(describe(r) if describe else f"rank {r}" for r in waiting)
        how = "raised" if reply.get("traceback") else "stopped on its failure"
        message = (f"{silent} did not answer within {grace:.3g} s after {name} {how}: waiting for it in a "
                   "collective it never joined (the ranks were restarted)")
        self._fail(message, [Failure(f.kind, f"{name}: {f.message}") for f in _failures(reply)],
                   reply.get("traceback"))

    def run(self, jobs: list[dict[str, Any]], describe: Any, timeout: float | None = None) -> list[dict[str, Any]]:
        """Send jobs[rank] to every rank; their replies, or RankFailure (the pool is then closed)."""
        if self.broken:
            raise RankFailure(self.broken)
        timeout = rank_timeout() if timeout is None else timeout
        for rank, job in enumerate(jobs):
            try:
                self.connections[rank].send(("run", job))
            except (BrokenPipeError, OSError):
                self._gather(timeout, EXAMPLE, describe)  # reports the dead rank
        replies = self._gather(timeout, EXAMPLE, describe)
        internal = [reply["internal"] for reply in replies if "internal" in reply]
        if internal:
            self.close()
            raise RuntimeError(f"the harness failed on a rank: {internal[0]}")
        if any(reply["failures"] for reply in replies):
            for connection in self.connections:  # a rank left inside a collective hangs here, now
                connection.send(("barrier",))
            self._gather(timeout, "the barrier after a failing example", describe)
        return replies

    def close(self) -> None:
        for connection in self.connections:
            with contextlib.suppress(Exception):
                connection.send(("stop",))
        for process in self.processes:
            process.join(0.5 if self.broken is None else 0)
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join(5)
        for connection in self.connections:
            connection.close()
        self.connections, self.processes = [], []


_POOLS: dict[tuple[int, str], RankPool] = {}


def pool_for(world: int, device: str) -> RankPool:
    """The live pool of this size on this device, started if there is none (or the last one broke)."""
    pool = _POOLS.get((world, device))
    if pool is not None and pool.imported.changed():  # its ranks run a user's file as it was before an edit
        pool.close()
        pool = None
    if pool is None or pool.broken or not pool.processes:
        pool = _POOLS[(world, device)] = RankPool(world, device)
    return pool


@atexit.register
def close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


# ------------------------------------------------------------------------------------------------- the engine

TORCH_RANK_POOLS = "torch rank pools"  # the engines' worker_setup: `pool_for`'s pools, kept per worker process
RANK_KEYWORDS = ("data_group", "sequence_group")  # what each rank's call takes besides its inputs


class TorchRanks(Engine):
    """Every rank of the mesh calls `fn(*its inputs, data_group=..., sequence_group=...)` at the same time, on
    gloo (NCCL on CUDA, for the meshes that fit the GPUs); gradients through the collectives, each replica
    backpropagating its outputs' cotangents."""

    name = "torch"
    framework = "torch"
    replicas_sum_cotangents = True
    worker_setup = TORCH_RANK_POOLS

    def devices(self, spec: Any) -> list[str]:
        from impls.frameworks import load_framework

        return load_framework("torch").devices()

    def shapes(self, device: str) -> tuple[tuple[int, int], ...]:
        if device != "cuda":
            return MESHES
        import torch

        return tuple(mesh for mesh in MESHES if mesh[0] * mesh[1] <= torch.cuda.device_count())

    def exact_cotangents(self, case: Case, cotangents: dict[str, np.ndarray], split: Split) -> dict[str, np.ndarray]:
        from fuzz.engines.judge import summed_over_replicas

        return summed_over_replicas(case, cotangents, split)

    def run(self, subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
            exact: Any) -> Verdict:
        from fuzz.engines.judge import compare_gradients, gather_forward, gather_gradients, rank_cotangents
        from fuzz.engines.split import shard

        jobs = []
        for rank in range(split.world):
            job: dict[str, Any] = {"subject": subject.key, "mesh": split.mesh, "case": shard(case, split, rank)}
            if cotangents is not None:
                job["cotangents"] = rank_cotangents(case, cotangents, split, rank)
            jobs.append(job)
        replies = pool_for(split.world, case.device).run(jobs, split.describe)
        if cotangents is None:
            return gather_forward(case, split, replies, split.describe, subject.precision)
        gradients, verdict = gather_gradients(case, split, replies, split.describe)
        if gradients is not None:
            verdict.merge(compare_gradients(case, gradients, exact, self.exact_cotangents(case, cotangents, split),
                                            subject.precision, split))
        return verdict

    def snippet(self, subject: Any, case: Case, split: Split, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        from fuzz.engines.snippets import torch_ranks_snippet

        return torch_ranks_snippet(subject, case, split, cotangents, failures)


ENGINE = TorchRanks()
