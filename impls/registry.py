"""The one registry of implementations, used by the fuzzer, the benchmarks and the tests alike.

Listing is cheap; a framework is imported only when an implementation of it is asked for. One that is
missing or broken makes its implementations unavailable, with the reason, and never breaks the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from impls.dtypes import DTYPE_NAMES
from impls.frameworks import Framework, load_framework


@dataclass(frozen=True)
class Implementation:
    """A callable with the contract's signature, and what it supports on this machine."""

    name: str
    framework: str  # the adapter that builds its inputs (impls/frameworks/)
    function: Callable[..., dict[str, Any]]
    devices: tuple[str, ...]
    dtypes: tuple[str, ...] = DTYPE_NAMES
    differentiable: bool = False
    compiled: bool = False
    benchmark_devices: tuple[str, ...] | None = None  # None: all its devices
    compiled_count: Callable[[], int] | None = None  # the module's own counter of compiled graphs or kernels
    # "torch" or "jax" for a per-rank function (fuzz/sharded/): it takes process groups or runs under
    # shard_map, so it is never called as a single-process function; None for the single-process ones.
    sharded: str | None = None

    def scope(self, case: Any) -> AbstractContextManager[None]:
        """The framework settings a call on `case` needs (its adapter's scope, e.g. JAX's x64 for float64)."""
        return self.adapter.scope(case, compiled=self.compiled)

    def compile_counter(self) -> Callable[[], int]:
        """How many graphs or kernels it has compiled so far (benchmarks check timing compiles none)."""
        return self.compiled_count or self.adapter.compile_counter(self.function)

    @property
    def benchmarked_devices(self) -> tuple[str, ...]:
        """The devices whose timings mean something (an interpreter's do not)."""
        return self.devices if self.benchmark_devices is None else self.benchmark_devices

    def __call__(self, token_log_probs: Any, advantages: Any, token_mask: Any) -> dict[str, Any]:
        if self.sharded:
            raise TypeError(f"{self.name} is a per-rank function for {self.sharded} meshes; "
                            "run it with fuzz.sharded (python -m fuzz runs its sharded rows)")
        return self.function(token_log_probs, advantages, token_mask)

    @property
    def adapter(self) -> Framework:
        return load_framework(self.framework)


@dataclass(frozen=True)
class _Spec:
    """A built-in. Devices, dtypes and differentiability default to its framework's; `devices`, `dtypes` and
    `benchmark_devices` narrow them (a device is listed only where the framework sees it). Its module
    defines `sequence_vs_token_normalization`, and may define `compiled_count()`."""

    framework: str
    module: str
    compiled: bool
    devices: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    differentiable: bool | None = None
    benchmark_devices: tuple[str, ...] | None = None
    sharded: str | None = None


_BUILTINS: dict[str, _Spec] = {
    "torch-eager": _Spec("torch", "impls.torch_eager", compiled=False),
    "torch-compile": _Spec("torch", "impls.torch_compile", compiled=True),
    # CPU tensors run through Triton's interpreter: fuzzed there, but its timings measure nothing real.
    "torch-triton": _Spec("torch", "impls.torch_triton", compiled=True, devices=("cpu", "cuda"),
                          differentiable=True, benchmark_devices=("cuda",)),
    "jax-jit": _Spec("jax", "impls.jax_jit", compiled=True),
    "numpy": _Spec("numpy", "impls.numpy_impl", compiled=False),
    # Written once against the Array API standard, fuzzed on its strict reference namespace (array_api_strict).
    "array-api": _Spec("array-api", "impls.array_api_impl", compiled=False),
    "torch-distributed": _Spec("torch", "impls.torch_distributed", compiled=False, sharded="torch"),
    "jax-shard-map": _Spec("jax", "impls.jax_shard_map", compiled=False, sharded="jax"),
}
# The single-process built-ins: what the ordinary campaign, the benchmarks and the contract tests call.
BUILTIN_NAMES: tuple[str, ...] = tuple(name for name, spec in _BUILTINS.items() if spec.sharded is None)
# The per-rank built-ins: only fuzz/sharded/ runs them (one process per rank, or under shard_map).
SHARDED_NAMES: tuple[str, ...] = tuple(name for name, spec in _BUILTINS.items() if spec.sharded is not None)
_loaded: dict[str, Implementation] = {}
_failures: dict[str, str] = {}


def _load(name: str) -> Implementation:
    spec = _BUILTINS[name]
    adapter = load_framework(spec.framework)
    module = importlib.import_module(spec.module)
    devices = tuple(device for device in adapter.devices() if spec.devices is None or device in spec.devices)
    benchmark_devices = None if spec.benchmark_devices is None else tuple(
        device for device in devices if device in spec.benchmark_devices)
    return Implementation(
        name=name,
        framework=spec.framework,
        function=module.sequence_vs_token_normalization,
        devices=devices,
        dtypes=tuple(d for d in adapter.dtypes if spec.dtypes is None or d in spec.dtypes),
        differentiable=adapter.differentiable if spec.differentiable is None else spec.differentiable,
        compiled=spec.compiled,
        benchmark_devices=benchmark_devices,
        compiled_count=getattr(module, "compiled_count", None),
        sharded=spec.sharded,
    )


def get_implementation(name: str) -> Implementation:
    """The built-in implementation `name`; raises LookupError if unknown, RuntimeError if unusable here."""
    if name not in _BUILTINS:
        raise LookupError(f"unknown implementation {name!r}; the built-ins are {', '.join(_BUILTINS)}")
    if name not in _loaded and name not in _failures:
        try:
            _loaded[name] = _load(name)
        except Exception as error:  # a broken install must not break the other frameworks
            _failures[name] = f"{type(error).__name__}: {error}"
    if name in _failures:
        raise RuntimeError(f"implementation {name!r} is unavailable here: {_failures[name]}")
    return _loaded[name]


def available_implementations() -> list[str]:
    """Names of the built-in implementations usable on this machine, in a fixed order."""
    available = []
    for name in BUILTIN_NAMES:
        try:
            get_implementation(name)
        except RuntimeError:
            continue
        available.append(name)
    return available


def unavailable_implementations() -> dict[str, str]:
    """Each built-in that cannot run here, with the reason."""
    available_implementations()
    return dict(_failures)
