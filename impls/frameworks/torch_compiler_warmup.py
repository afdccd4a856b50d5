"""Inductor's facts about this process's machine and installation, computed on import: the server that worker
processes fork from imports it where a run compiles with torch.compile (`compiler_modules`), so each worker
inherits them instead of computing them at its first compile: the CPU's vector ISA, probed by building and
loading test programs in subprocesses, and the hashes of torch's and Triton's sources that key the compile
caches (docs/measurements.md has what each costs). Each is what the first compile would compute, cached by torch
per process. They are torch's private functions: where one is missing (another torch version), the worker
computes it itself, as before."""

from __future__ import annotations

import contextlib


def compute() -> None:
    with contextlib.suppress(Exception):
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        pick_vec_isa()
    with contextlib.suppress(Exception):
        from torch._inductor.codecache import torch_key

        torch_key()
    with contextlib.suppress(Exception):
        from triton.runtime.cache import triton_key

        triton_key()


compute()
