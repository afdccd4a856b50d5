"""What one benchmark run measures: the (implementation or floor kernel) x device x dtype x size grid.

Pure bookkeeping: conftest.py turns a Plan into pytest parameters, ordered size by size and dtype by
dtype so that each fixed-seed input is built once and shared by every implementation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bench.floor import KERNELS
from bench.sizes import DEFAULT_DTYPES, DEVICES, SIZES, Size, sizes_for
from impls import BUILTIN_NAMES, available_implementations, get_implementation
from impls.frameworks import FRAMEWORK_NAMES, load_framework
from reference.dtypes import DTYPE_NAMES


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


# The names each selection option accepts. Listing them imports no framework, so a misspelt name is refused
# in a fraction of a second rather than after the seconds torch and JAX take to import.
CHOICES: dict[str, tuple[str, ...]] = {
    "implementations": BUILTIN_NAMES,
    "devices": DEVICES,
    "dtypes": DTYPE_NAMES,
    "sizes": tuple(SIZES),
}
_SINGULAR = {"implementations": "implementation", "devices": "device", "dtypes": "dtype", "sizes": "size"}


def split(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_names(option: str, text: str) -> tuple[str, ...]:
    """The comma-separated names in `text` for the selection `option` ("sizes", ...); raises ValueError naming
    the unknown ones and the valid choices."""
    choices = CHOICES[option]
    what = _SINGULAR[option]
    names = split(text)
    if not names:
        raise ValueError(f"no {what} given; choose from {', '.join(choices)}")
    unknown = [name for name in names if name not in choices]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ValueError(f"unknown {what}{plural} {', '.join(map(repr, unknown))}; choose from {', '.join(choices)}")
    return names


def framework_devices(framework: str) -> tuple[str, ...]:
    try:
        return tuple(load_framework(framework).devices())
    except Exception:  # a missing framework has no devices; the others still run
        return ()


def devices_here(wanted: Iterable[str] = DEVICES) -> tuple[str, ...]:
    """The devices some framework here sees, in DEVICES order. Each framework takes seconds to import, so they
    are asked one at a time and only until every device in `wanted` has been seen: the answer is complete
    for the devices of `wanted`, and complete for all devices whenever one of `wanted` is missing."""
    wanted_here = set(wanted) & set(DEVICES)
    found: set[str] = set()
    for name in FRAMEWORK_NAMES:
        if wanted_here <= found:
            break
        found.update(framework_devices(name))
    return tuple(device for device in DEVICES if device in found)


def make_plan(
    implementations: str | None = None, devices: str | None = None, dtypes: str | None = None,
    sizes: str | None = None,
) -> Plan:
    """The plan for these comma-separated selections (None or empty: the default). Every name is checked
    before the defaults, which import the frameworks, are worked out."""
    given = {"implementations": implementations, "devices": devices, "dtypes": dtypes, "sizes": sizes}
    chosen = {option: parse_names(option, text) if text else None for option, text in given.items()}
    return Plan(
        chosen["implementations"] or tuple(available_implementations()),
        chosen["devices"] or devices_here(),
        chosen["dtypes"] or DEFAULT_DTYPES,
        chosen["sizes"],
    )


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
    reasons: dict[str, str] = {}
    for name in plan.implementations:  # only those asked for: loading one imports its framework
        try:
            get_implementation(name)
        except RuntimeError as error:
            reasons[name] = str(error)
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
            if device not in devices_here((device,)):
                reasons[device] = f"skipped: no {device.upper()} device"
            elif not runnable:
                reasons[device] = f"nothing to run on {device}: no selected implementation is available"
            else:
                verb = "is" if len(runnable) == 1 else "are"
                reasons[device] = (f"nothing to run on {device}: {', '.join(runnable)} {verb} not benchmarked "
                                   f"on {device} in {', '.join(plan.dtypes)}")
    return found, reasons
