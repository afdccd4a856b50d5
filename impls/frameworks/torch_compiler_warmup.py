"""Inductor's facts about this process's machine and installation, computed on import: the server that worker
processes fork from imports it where a run compiles with torch.compile (`compiler_modules`), so each worker
inherits them instead of computing them at its first compile: the CPU's vector ISA, probed by building and
loading test programs in subprocesses (the candidate ISAs in parallel here), and the hashes of torch's and
Triton's sources that key the compile caches (docs/measurements.md has what each costs). Each is what the first
compile would compute, cached by torch per process. They are torch's private functions: where one is missing
(another torch version), the worker computes it itself at its first compile."""

from __future__ import annotations

import contextlib


def _probe_vector_isas() -> None:
    """Build and load each candidate ISA's test programs at once, one thread each (the builds are compiler
    subprocesses), instead of one after the other as `pick_vec_isa` does: the results are cached on the ISA
    objects, which `pick_vec_isa` then reads. Only the ISAs whose flags the CPU reports are built, as there."""
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor import cpu_vec_isa

    flags = cpu_vec_isa.x86_isa_checker()
    candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list
                  if all(flag in flags for flag in str(isa).split())]
    if candidates:
        with ThreadPoolExecutor(len(candidates)) as pool:  # joined on exit: no thread is left when workers fork
            list(pool.map(bool, candidates))


def compute() -> None:
    with contextlib.suppress(Exception):
        _probe_vector_isas()
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
