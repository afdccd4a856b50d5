"""The plan of a run: one task per cell, small enough to send to a worker process. A cell is one (subject,
device, check, dtype), and for a sharded engine one mesh too: the single-process and the sharded cells are
the same kind of task, run by the same workers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fuzz.run.subjects import SubjectSpec


@dataclass(frozen=True)
class CellTask:
    """One cell. `engine` None: the function called in the worker's process; else a sharded engine's name
    (fuzz/engines/registry.py) and its `mesh` (data, sequence)."""

    subject: SubjectSpec
    device: str
    dtype: str
    check: str  # "forward" or "gradients"
    examples: int
    seed: int
    engine: str | None = None
    mesh: tuple[int, int] | None = None

    @property
    def row(self) -> str:
        """The matrix row's check column: the check, and for a sharded engine the engine's kind and mesh."""
        if self.engine is None:
            return self.check
        from fuzz.engines.registry import engine_named

        return engine_named(self.engine).row(self.mesh, self.check)

    @property
    def worker_setup(self) -> str:
        """What a worker starts for this cell and keeps for the next (its engine's `worker_setup`); "" for none."""
        if self.engine is None:
            return ""
        from fuzz.engines.registry import engine_named

        return engine_named(self.engine).worker_setup


def default_gradient_examples(max_examples: int, split: bool) -> int:
    """Examples per gradient cell unless asked: half the forward's, and as many for an engine's cells (a batch
    split over ranks or micro-batches), whose gradient bugs need a nonzero cotangent crossing several ranks,
    which half the budget draws too rarely."""
    return max_examples if split else max(1, max_examples // 2)


def gradients_checked(asked: bool | None, differentiable: bool) -> bool:
    """Whether gradient cells run: as asked (`--gradients` / `--no-gradients`, `gradients=`); asked nothing,
    wherever the function's framework differentiates: a loss exists to be differentiated."""
    return differentiable if asked is None else asked


def no_dtype_held(framework: str, asked: Sequence[str], held: Sequence[str]) -> str | None:
    """Why nothing would be checked: none of the dtypes asked for is one `framework` holds (the Array API has no
    float16 or bfloat16). None when one is; those it lacks are n/a cells, as in every matrix."""
    if any(dtype in held for dtype in asked):
        return None
    return (f"{framework} has none of the dtypes asked for ({', '.join(asked)}): it holds {', '.join(held)}, so "
            "nothing would be checked")


def plan_cells(subjects: Sequence[tuple[SubjectSpec, Sequence[str]]], dtypes: Sequence[str],
               devices: Sequence[str] | None, max_examples: int, seed: int, gradients: bool,
               gradient_examples: int) -> list[CellTask]:
    """Every (subject, device, check, dtype) cell; each subject's forward cells before its gradient cells."""
    checks = [("forward", max_examples)] + ([("gradients", gradient_examples)] if gradients else [])
    return [
        CellTask(spec, device, dtype, check, examples, seed)
        for spec, subject_devices in subjects
        for device in subject_devices if devices is None or device in devices
        for check, examples in checks
        for dtype in dtypes
    ]
