"""The DDP engine: a step's R x G chunks on R real torch.distributed ranks (the torch ranks' pools, gloo on
127.0.0.1), each rank's G micro-batches in a loop, the gradients averaged by DistributedDataParallel itself.

Each rank calls, for each of its micro-batches g in order, at the same time as the other ranks,

    fn(*its chunk's inputs, step_masks=..., group=..., accumulation_steps=G)

with only its chunk's inputs, `step_masks` the masks of all of its G micro-batches (as a trainer holds its
mini-batch before the micro-batch loop) and `group` the data-parallel process group (every rank): the function
computes the step's normalizers itself with collectives (an all-reduce of the counts, as verl's and NeMo-RL's
engines do) and returns its chunk's loss. The per-token losses are a slice of one parameter of a module under
DDP, so each backward (`(c * scale * loss).backward()`, `no_sync()` before the last) accumulates into it and DDP's
reducer averages the ranks' gradients (or sums them with a comm hook, for dp_reduce="sum"): the engine's own
collective, not one of the harness's. The combined loss and the parameter's gradient are judged as the
in-process engine judges them (fuzz/engines/accumulation.py).
"""

from __future__ import annotations

import contextlib
import functools
import traceback
import warnings
from typing import Any

import numpy as np

from fuzz.engines.accumulation import Accumulation
from fuzz.engines.chunks import ChunkSplit, chunk_weight, explain_combined_gradient, judge_combined
from fuzz.engines.torch_ranks import TORCH_RANK_POOLS
from fuzz.judge.gradients import judge_gradients
from fuzz.judge.outputs import GRADIENT_MISSING
from fuzz.judge.verdict import Failure, Verdict
from reference.case import Case

RANKS_FAILED = "a rank failed"


def _sum_hook(state, bucket):  # unannotated: DDP refuses a hook whose annotations are not its own types
    """A DDP comm hook that sums the ranks' gradients (DDP's own averages them)."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda future: future.value()[0])


RANK_KEYWORDS = ("step_masks", "group", "accumulation_steps")  # what each rank's call takes besides its inputs


def rank_step(job: dict[str, Any], groups: Any, rank: int) -> dict[str, Any]:
    """On a rank: its micro-batch loop under DDP, forward (the chunk losses) and with cotangents the backward."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from fuzz.engines.torch_ranks import LEFT_EARLY, LOAD_FAILED, resolve
    from fuzz.judge.outputs import check_outputs
    from fuzz.judge.verdict import call_safely
    from impls.frameworks import load_framework

    # A rank with an empty micro-batch has a zero-size parameter slice, whose gradient strides torch warns about
    # (a note on speed, printed past 100 columns on the user's terminal): nothing the function did.
    warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")
    adapter, case, split = load_framework("torch"), job["case"], job["split"]
    values = case.values[case.contract.differentiable_inputs[0].name]  # the per-token values: DDP's parameter
    try:
        fn = resolve(job["subject"], case.contract)
    except Exception as error:
        return {"failures": [Failure(LOAD_FAILED, f"cannot load the function on the rank: {error}")],
                "traceback": traceback.format_exc()}

    class Step(torch.nn.Module):  # the step's per-token losses as one parameter: what DDP averages
        def __init__(self) -> None:
            super().__init__()
            self.values = torch.nn.Parameter(torch.tensor(np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0),
                                                          dtype=getattr(torch, case.dtype)))

        def forward(self) -> torch.Tensor:
            return self.values

    step = DistributedDataParallel(Step())
    with torch.no_grad():  # the masked positions' values as the case has them, inf and NaN included
        step.module.values.copy_(torch.tensor(values, dtype=step.module.values.dtype))
    if not case.contract.chunked.ranks_averaged(case.contract.bound):
        step.register_comm_hook(None, _sum_hook)
    mine = [rank * split.steps + g for g in range(split.steps)]
    masks = [torch.tensor(case.mask[split.rows(k), :split.widths[k]]) for k in mine]
    cotangent = job.get("cotangent")
    losses, failures, tb = [], [], None
    stopped = True  # until the loop ends without a break
    for g, k in enumerate(mine):
        last = g == len(mine) - 1
        with contextlib.nullcontext() if last or cotangent is None else step.no_sync():
            chunk = step()[split.rows(k), :split.widths[k]]
            bound = functools.partial(fn, step_masks=masks, group=dist.group.WORLD, accumulation_steps=split.steps)
            result, verdict = call_safely(bound, chunk, masks[g])
            failures += [Failure(f.kind, f"{split.describe(k)}: {f.message}") for f in verdict.failures]
            tb = tb or verdict.traceback
            if not verdict.ok:
                break
            read, structure = check_outputs(result, adapter, case.with_(**{
                name: case.values[name][split.rows(k), :split.widths[k]] for name in case.contract.input_names}))
            failures += [Failure(f.kind, f"{split.describe(k)}: {f.message}") for f in structure.failures]
            if read is None:
                break
            losses.append(float(np.asarray(read.values[case.contract.outputs[0].name])))
            if cotangent is not None:
                if not result.requires_grad:
                    failures.append(Failure(GRADIENT_MISSING, f"{split.describe(k)}: its loss carries no gradient "
                                                              "(it does not require grad)"))
                    break
                _, backward = call_safely(result.backward, torch.tensor(cotangent, dtype=result.dtype))
                failures += [Failure(f"backward {f.kind}", f"{split.describe(k)}: backward {f.message}")
                             for f in backward.failures]
                tb = tb or backward.traceback
                if not backward.ok:
                    break
    else:
        stopped = False
    # a failure stopped the loop short of the step's end: the other ranks may wait for this one in a collective (the
    # function's own, or DDP's all-reduce in the last backward), and the pool gives them a short grace, not the deadline
    reply: dict[str, Any] = {"failures": failures, "traceback": tb, "losses": losses, LEFT_EARLY: stopped}
    if cotangent is not None and not failures:
        grad = step.module.values.grad
        reply["gradient"] = None if grad is None else grad.detach().to(torch.float64).numpy()
    return reply


class TorchDDP(Accumulation):
    name = "ddp"
    framework = "torch"
    kind = "DDP ranks"
    runs_on = "torch.distributed ranks under DDP"
    in_process = False
    campaign_examples = 6
    worker_setup = TORCH_RANK_POOLS

    def devices(self, spec: Any) -> list[str]:
        return ["cpu"]  # gloo: NCCL needs a GPU per rank

    def run(self, subject: Any, case: Case, split: ChunkSplit, cotangents: dict[str, np.ndarray] | None,
            exact: Any) -> Verdict:
        from fuzz.engines.torch_ranks import pool_for

        weight = chunk_weight(case, split)
        # the combined loss is averaged over the ranks by DDP itself: each rank's backward gets c * (1/G or 1)
        scale = weight * (split.ranks if case.contract.chunked.ranks_averaged(case.contract.bound) else 1.0)
        job: dict[str, Any] = {"subject": subject.key, "case": case, "split": split,
                               "runner": ("fuzz.engines.torch_ddp", "rank_step")}
        if cotangents is not None:
            job["cotangent"] = float(np.asarray(cotangents[case.contract.outputs[0].name])) * scale
        replies = pool_for(split.ranks, "cpu").run([job] * split.ranks, lambda rank: f"rank {rank}")
        verdict = Verdict()
        for rank, reply in enumerate(replies):
            verdict.failures += [Failure(f.kind, f"rank {rank}: {f.message}") for f in reply["failures"]]
            verdict.traceback = verdict.traceback or reply.get("traceback")
        if not verdict.ok:
            return verdict
        name = case.contract.outputs[0].name
        if cotangents is None:
            losses = [float(loss) for reply in replies for loss in reply["losses"]]  # rank-major: chunk order
            combined = weight * float(np.sum(losses))
            verdict.merge(judge_combined(case, split, combined, case.dtype, subject.precision, losses,
                                         counts_its_own=True), prefix=f"the combined {name}: ")
            return verdict
        gradients = [reply.get("gradient") for reply in replies]
        if any(gradient is None for gradient in gradients):
            verdict.fail(GRADIENT_MISSING, "the step's losses got no gradient on some rank")
            return verdict
        for rank, gradient in enumerate(gradients[1:], 1):
            if not np.array_equal(gradient, gradients[0], equal_nan=True):
                verdict.fail("replicas disagree", f"rank {rank}'s averaged gradient differs from rank 0's")
        label = f"d {case.contract.differentiable_inputs[0].name}"
        verdict.merge(judge_gradients(case, {label: gradients[0]}, exact, cotangents, subject.precision,
                                      explain_combined_gradient(case, split)))
        return verdict

    def snippet(self, subject: Any, case: Case, split: ChunkSplit, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        from fuzz.engines.snippets import ddp_snippet

        return ddp_snippet(subject, case, split, cotangents, failures)


ENGINE = TorchDDP()
