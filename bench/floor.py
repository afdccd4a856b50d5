"""The floor: the time to read the same number of bytes once on a device, with a plain reduction.

Each kernel sums a float32 array of the benchmarked byte count; the report takes the best kernel per
device and size as the floor, so an implementation's "% of floor" compares it with the fastest simple
read this machine manages in the same run. Frameworks are imported only inside the kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Timed = Callable[[], object]


@dataclass(frozen=True)
class FloorKernel:
    name: str
    framework: str
    devices: tuple[str, ...]
    prepare: Callable[[str, int], Timed]  # (device, elements) -> a call that reads them and waits


def _numpy_sum(device: str, elements: int) -> Timed:
    data = np.full(elements, 1.0, dtype=np.float32)  # written, so every page is real memory
    return data.sum


def _torch_sum(device: str, elements: int) -> Timed:
    import torch

    data = torch.full((elements,), 1.0, dtype=torch.float32, device=device)
    if device == "cpu":
        return data.sum

    def call() -> object:
        total = data.sum()
        torch.cuda.synchronize()
        return total

    return call


def _jax_sum(device: str, elements: int) -> Timed:
    import jax
    import jax.numpy as jnp

    target = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    data = jax.device_put(np.full(elements, 1.0, dtype=np.float32), target)
    total = jax.jit(jnp.sum)
    return lambda: total(data).block_until_ready()


KERNELS: tuple[FloorKernel, ...] = (
    FloorKernel("numpy-sum", "numpy", ("cpu",), _numpy_sum),
    FloorKernel("torch-sum", "torch", ("cpu", "cuda"), _torch_sum),
    FloorKernel("jax-sum", "jax", ("cpu", "cuda"), _jax_sum),
)


def kernels_for(device: str) -> tuple[FloorKernel, ...]:
    return tuple(kernel for kernel in KERNELS if device in kernel.devices)


def elements_for(nbytes: int) -> int:
    return max(1, nbytes // 4)
