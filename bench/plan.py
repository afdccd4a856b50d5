"""What one benchmark run measures: the (implementation or floor kernel) x device x dtype x size grid.

Pure bookkeeping: conftest.py turns a Plan into pytest parameters, ordered size by size and dtype by
dtype so that each fixed-seed input is built once and shared by every implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.floor import KERNELS
from bench.sizes import DEFAULT_DTYPES, DEVICES, SIZES, Size, sizes_for
from impls import available_implementations, get_implementation, unavailable_implementations
from impls.dtypes import DTYPE_NAMES
from impls.frameworks import FRAMEWORK_NAMES, load_framework


@dataclass(frozen=True)
class Target:
    """One benchmark: an implementation (or a floor kernel) on one device, dtype and size."""

    subject: str  # an implementation name, or a floor kernel's name
    device: str
    dtype: str
    size: Size
    floor: bool = False

    @property
    def id(self) -> str:
        kind = "floor-" if self.floor else ""
        return f"{self.device}-{self.dtype}-{self.size.name}-{kind}{self.subject}"

    @property
    def group(self) -> str:
        return f"{self.device} {self.dtype} {self.size.name} {self.size.label}"

    @classmethod
    def from_id(cls, text: str) -> Target:
        """The inverse of `id` (pytest parameters are these strings, so saved runs stay plain JSON)."""
        device, dtype, size, subject = text.split("-", 3)
        floor = subject.startswith("floor-")
        return cls(subject.removeprefix("floor-"), device, dtype, SIZES[size], floor=floor)


@dataclass(frozen=True)
class Plan:
    implementations: tuple[str, ...]
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    sizes: tuple[str, ...] | None  # None: each device's default sizes


def split(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def framework_devices(framework: str) -> tuple[str, ...]:
    try:
        return tuple(load_framework(framework).devices())
    except Exception:  # a missing framework has no devices; the others still run
        return ()


def devices_here() -> tuple[str, ...]:
    found = {device for name in FRAMEWORK_NAMES for device in framework_devices(name)}
    return tuple(device for device in DEVICES if device in found)


def make_plan(
    implementations: str | None = None, devices: str | None = None, dtypes: str | None = None,
    sizes: str | None = None,
) -> Plan:
    names = split(implementations) or tuple(available_implementations())
    unknown = [name for name in names if name not in _all_names()]
    if unknown:
        raise ValueError(f"unknown implementation(s) {', '.join(unknown)}; choose from {', '.join(_all_names())}")
    wanted_devices = split(devices) or devices_here()
    for device in wanted_devices:
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r}; choose from {', '.join(DEVICES)}")
    wanted_dtypes = split(dtypes) or DEFAULT_DTYPES
    for dtype in wanted_dtypes:
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPE_NAMES)}")
    wanted_sizes = split(sizes)
    for size in wanted_sizes or ():
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    return Plan(names, wanted_devices, wanted_dtypes, wanted_sizes)


def _all_names() -> tuple[str, ...]:
    from impls import BUILTIN_NAMES

    return BUILTIN_NAMES


def _ordered(plan: Plan) -> list[tuple[Size, str, str]]:
    """(size, dtype, device) in the order that reuses each built input the most."""
    per_device = {device: sizes_for(device, plan.sizes) for device in plan.devices}
    order = []
    for size in SIZES.values():
        for dtype in plan.dtypes:
            order += [(size, dtype, device) for device in plan.devices if size in per_device[device]]
    return order


def targets(plan: Plan) -> tuple[list[Target], dict[str, str]]:
    """Every benchmark that can run here, each (size, dtype, device) group's floor kernels first so
    they run under the same conditions; and why the rest cannot (implementation or device -> reason)."""
    reasons = {
        name: f"{name} is unavailable: {why}"
        for name, why in unavailable_implementations().items()
        if name in plan.implementations
    }
    runnable = [name for name in plan.implementations if name not in reasons]
    found: list[Target] = []
    for size, dtype, device in _ordered(plan):
        group = [
            Target(name, device, dtype, size)
            for name in runnable
            if device in get_implementation(name).benchmarked_devices and dtype in get_implementation(name).dtypes
        ]
        if group:
            found += [
                Target(kernel.name, device, dtype, size, floor=True)
                for kernel in KERNELS
                if device in framework_devices(kernel.framework)
            ]
            found += group
    for device in plan.devices:
        if not any(target.device == device for target in found):
            reasons[device] = f"skipped: no {device.upper()} device" if device != "cpu" else "nothing to run"
    return found, reasons
