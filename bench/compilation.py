"""How many graphs an implementation has compiled so far: read before and after timing, they must match.

An implementation module may count its own (`compiled_kernel_count()`: torch-triton's Triton kernels);
torch.compile counts in dynamo's global counters; a jitted JAX function counts the entries of its own
cache (the implementation module's `compiled_normalize`). Eager implementations never compile: always 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from impls import Implementation


def compile_counter(impl: Implementation) -> Callable[[], int]:
    own_counter = getattr(sys.modules[impl.function.__module__], "compiled_kernel_count", None)
    if own_counter is not None:  # e.g. Triton kernels, which dynamo's counters do not see
        return own_counter
    if impl.framework == "torch":
        from torch._dynamo.utils import counters

        return lambda: int(counters["stats"]["unique_graphs"])
    if impl.framework == "jax":
        jitted = getattr(sys.modules[impl.function.__module__], "compiled_normalize", None)
        if jitted is None or not hasattr(jitted, "_cache_size"):
            raise RuntimeError(f"{impl.name}: no jitted `compiled_normalize` whose cache can be counted")
        return lambda: int(jitted._cache_size())
    return lambda: 0
