"""What one benchmark run measures: the (contract x implementation or floor kernel) x device x dtype x size grid.

Pure bookkeeping: conftest.py turns a Plan into pytest parameters, ordered size by size, dtype by dtype and
contract by contract so that each fixed-seed input is built once and shared by every implementation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bench.contracts import BENCHMARKED, canonical_mode
from bench.floor import KERNELS, FloorKernel
from bench.sizes import DEFAULT_DTYPES, DEVICES, SIZES, Size, sizes_for
from bench.user_rows import USER_ROW, framework_of
from impls import available_implementations, get_implementation
from impls.frameworks import FRAMEWORK_NAMES, load_framework
from impls.registry import builtin_names
from reference.contract import Contract
from reference.contracts import get_contract
from reference.dtypes import DTYPE_NAMES


@dataclass(frozen=True)
class Target:
    """One benchmark: an implementation of a contract (or a floor kernel reading that contract's bytes) on one
    device, dtype and size."""

    contract: str
    subject: str  # an implementation name, or a floor kernel's name
    device: str
    dtype: str
    size: Size
    floor: bool = False

    @property
    def id(self) -> str:
        """"reduction-cpu-float32-large-numpy": no contract, device, dtype or size name holds a "-", so the id
        splits back at the first four."""
        kind = "floor-" if self.floor else ""
        return f"{self.contract}-{self.device}-{self.dtype}-{self.size.name}-{kind}{self.subject}"

    @property
    def group(self) -> str:
        """pytest-benchmark's group (saved runs compare group by group): rows of one contract, device, dtype
        and size, next to the floor of that contract's bytes."""
        return f"{self.contract} {self.device} {self.dtype} {self.size.name} {self.size.label}"

    @classmethod
    def from_id(cls, text: str) -> Target:
        """The inverse of `id` (pytest parameters are these strings, so saved runs stay plain JSON)."""
        contract, device, dtype, size, subject = text.split("-", 4)
        floor = subject.startswith("floor-")
        return cls(contract, subject.removeprefix("floor-"), device, dtype, SIZES[size], floor=floor)


@dataclass(frozen=True)
class Plan:
    contracts: tuple[str, ...]
    implementations: tuple[str, ...] | None  # None: every available built-in of each contract
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    sizes: tuple[str, ...] | None  # None: each device's default sizes
    reduction: str | None = None  # the reduction contract's mode; None: its default (token-mean)
    user: UserTarget | None = None  # a user's function timed beside the built-ins of its contract


@dataclass(frozen=True)
class UserTarget:
    """`--target TARGET --framework F` and the contract it declares (as `check` declares it)."""

    target: str
    framework: str
    contract: str
    parameters: tuple[tuple[str, object], ...] = ()
    masked_values: str = "any"  # "finite": its inputs hold no -inf at masked-out positions

    @classmethod
    def declared(cls, target: str, framework: str, reduction: str | None = None, rows: str | None = None,
                 l_max: float | None = None, masked_values: str = "any") -> UserTarget:
        """ValueError naming the option that is wrong or needs another (`--rows` without `--reduction`). A mode
        spelled as a trainer spells it keeps that trainer's convention, as `check` reads it."""
        from fuzz.run.subjects import declared_contract

        contract, parameters = declared_contract(reduction, rows, l_max,
                                                 spell=lambda name: "--" + name.replace("_", "-"))
        return cls(target, framework, contract, tuple(parameters.items()), masked_values)

    @property
    def bound_contract(self) -> Contract:
        return get_contract(self.contract, dict(self.parameters))


def _union(groups: Iterable[Iterable[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for group in groups for name in group))


# The names each selection option accepts. Listing them imports no framework, so a misspelt name is refused
# in a fraction of a second rather than after the seconds torch and JAX take to import. An implementation
# name is any benchmarked contract's built-in.
CHOICES: dict[str, tuple[str, ...]] = {
    "contracts": BENCHMARKED,
    "implementations": _union(builtin_names(contract) for contract in BENCHMARKED),
    "devices": DEVICES,
    "dtypes": DTYPE_NAMES,
    "sizes": tuple(SIZES),
}
_SINGULAR = {"contracts": "contract", "implementations": "implementation", "devices": "device", "dtypes": "dtype",
             "sizes": "size"}


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


def foreign_implementations(contracts: Iterable[str], implementations: Iterable[str]) -> list[str]:
    """The implementations that are a built-in of none of `contracts` (each is some benchmarked contract's)."""
    known = _union(builtin_names(contract) for contract in contracts)
    return [name for name in implementations if name not in known]


def framework_devices(framework: str) -> tuple[str, ...]:
    try:
        return tuple(load_framework(framework).devices())
    except Exception:  # a missing framework has no devices; the others still run
        return ()


def floor_kernels(device: str) -> list[FloorKernel]:
    """The floor kernels that run on `device`: a group's floor rows, and an implementation row's paired floors."""
    return [kernel for kernel in KERNELS if device in framework_devices(kernel.framework)]


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
    sizes: str | None = None, contracts: str | None = None, reduction: str | None = None,
    user: UserTarget | None = None,
) -> Plan:
    """The plan for these comma-separated selections (None or empty: the default). Every name is checked
    before the defaults, which import the frameworks, are worked out. With a user's function, the run is its
    contract's: the other contract's rows would not compare with it."""
    given = {"contracts": contracts, "implementations": implementations, "devices": devices, "dtypes": dtypes,
             "sizes": sizes}
    chosen = {option: parse_names(option, text) if text else None for option, text in given.items()}
    return Plan(
        (user.contract,) if user else chosen["contracts"] or BENCHMARKED,
        chosen["implementations"],
        chosen["devices"] or devices_here(),
        chosen["dtypes"] or DEFAULT_DTYPES,
        chosen["sizes"],
        canonical_mode(reduction) if reduction else None,
        user,
    )


def _ordered(plan: Plan) -> list[tuple[Size, str, str, str]]:
    """(size, dtype, contract, device) in the order that reuses each built input the most (one per contract,
    size and dtype, shared by the devices)."""
    per_device = {device: sizes_for(device, plan.sizes) for device in plan.devices}
    order = []
    for size in SIZES.values():
        for dtype in plan.dtypes:
            for contract in plan.contracts:
                order += [(size, dtype, contract, device) for device in plan.devices if size in per_device[device]]
    return order


def _selected(plan: Plan, contract: str) -> list[str]:
    """The implementations of `contract` the plan asks for: those named that it has, or every available one."""
    if plan.implementations is None:
        return available_implementations(contract)
    return [name for name in plan.implementations if name in builtin_names(contract)]


def _user_runs(plan: Plan, reasons: dict[str, str]) -> set[tuple[str, str]]:
    """The (device, dtype) pairs of the plan the user's framework runs; the others, and a framework that does not
    load, with the reason."""
    user = plan.user
    if user is None:
        return set()
    try:
        adapter = framework_of(user.framework)
    except Exception as error:  # the framework is missing here: the row is skipped with why
        reasons[USER_ROW] = f"framework {user.framework} is unavailable here: {type(error).__name__}: {error}"
        return set()
    for dtype in plan.dtypes:
        if dtype not in adapter.dtypes:
            reasons[f"{USER_ROW}-{dtype}"] = f"--target: {user.framework} has no {dtype} ({', '.join(adapter.dtypes)})"
    return {(device, dtype) for device in adapter.devices() for dtype in adapter.dtypes}


def targets(plan: Plan) -> tuple[list[Target], dict[str, str]]:
    """Every benchmark that can run here, each (contract, size, dtype, device) group's floor kernels first so
    they run under the same conditions; and why the rest cannot (implementation, "contract-implementation" or
    device -> reason)."""
    reasons: dict[str, str] = {}
    for name in foreign_implementations(plan.contracts, plan.implementations or ()):
        reasons[name] = f"{name} is no built-in of the {', '.join(plan.contracts)} contract(s)"
    runnable: dict[str, list[str]] = {}
    for contract in plan.contracts:
        runnable[contract] = []
        for name in _selected(plan, contract):  # only those asked for: loading one imports its framework
            try:
                get_implementation(name, contract)
            except RuntimeError as error:
                reasons[f"{contract}-{name}"] = str(error)
            else:
                runnable[contract].append(name)
    user_runs = _user_runs(plan, reasons)
    found: list[Target] = []
    for size, dtype, contract, device in _ordered(plan):
        group = [
            Target(contract, name, device, dtype, size)
            for name in runnable[contract]
            if device in (impl := get_implementation(name, contract)).benchmarked_devices and dtype in impl.dtypes
        ]
        if plan.user is not None and contract == plan.user.contract and (device, dtype) in user_runs:
            group.append(Target(contract, USER_ROW, device, dtype, size))
        if group:
            found += [Target(contract, kernel.name, device, dtype, size, floor=True)
                      for kernel in floor_kernels(device)]
            found += group
    names = _union([*runnable.values(), [USER_ROW] if user_runs else []])
    for device in plan.devices:
        if not any(target.device == device for target in found):
            if device not in devices_here((device,)):
                reasons[device] = f"skipped: no {device.upper()} device"
            elif not names:
                reasons[device] = f"nothing to run on {device}: no selected implementation is available"
            else:
                verb = "is" if len(names) == 1 else "are"
                reasons[device] = (f"nothing to run on {device}: {', '.join(names)} {verb} not benchmarked "
                                   f"on {device} in {', '.join(plan.dtypes)}")
    return found, reasons
