"""The floor: the time to read the same number of bytes once on a device, with a plain reduction.

Each framework's adapter has one floor kernel (it sums a float32 array of the benchmarked byte count); the
report takes the best kernel per device and size as the floor, so an implementation's "% of floor"
compares it with the fastest simple read this machine manages in the same run. Frameworks are imported
only when a kernel is prepared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from impls.frameworks import FRAMEWORK_NAMES, adapter_class, load_framework

Timed = Callable[[], object]


@dataclass(frozen=True)
class FloorKernel:
    name: str  # e.g. "torch-sum"
    framework: str

    def prepare(self, device: str, elements: int) -> Timed:
        """A call that reads `elements` float32 values on `device` and waits for the result."""
        return load_framework(self.framework).floor_kernel(device, elements)


KERNELS: tuple[FloorKernel, ...] = tuple(
    FloorKernel(adapter_class(name).floor_name, name) for name in FRAMEWORK_NAMES if adapter_class(name).floor_name
)


def kernel_named(name: str) -> FloorKernel:
    return next(kernel for kernel in KERNELS if kernel.name == name)


def elements_for(nbytes: int) -> int:
    return max(1, nbytes // 4)
