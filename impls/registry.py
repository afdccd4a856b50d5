"""The one registry of implementations, used by the fuzzer, the benchmarks and the tests alike.

Built-ins are listed per contract (reference/contracts.py): `get_implementation("torch-eager")` is the magnitude
diagnostic's, `get_implementation("torch-eager", contract="reduction")` the loss reduction's. Listing is cheap;
a framework is imported only when an implementation of it is asked for. One that is missing or broken makes
its implementations unavailable, with the reason, and never breaks the others.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from impls.frameworks import Framework, adapter_class, load_framework
from reference.contract import Contract
from reference.contracts import CONTRACT_NAMES, get_contract
from reference.dtypes import DTYPE_NAMES

DEFAULT = CONTRACT_NAMES[0]


@dataclass(frozen=True)
class Implementation:
    """A callable with its contract's signature, and what it supports on this machine."""

    name: str
    framework: str  # the adapter that builds its inputs (impls/frameworks/)
    function: Callable[..., Any]
    contract: Contract
    devices: tuple[str, ...]
    dtypes: tuple[str, ...] = DTYPE_NAMES
    differentiable: bool = False
    compiled: bool = False
    benchmark_devices: tuple[str, ...] | None = None  # None: all its devices
    compiled_count: Callable[[], int] | None = None  # the module's own counter of compiled graphs or kernels
    # "torch" or "jax" for a per-rank function (fuzz/engines/): it takes process groups or runs under
    # shard_map, so it is never called as a single-process function; None for the single-process ones.
    sharded: str | None = None
    # the sharded engines (fuzz/engines/registry.py) the campaign runs it on: a per-rank function's own, and for a
    # single-process one any that checks it on sharded inputs
    engines: tuple[str, ...] = ()

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

    def __call__(self, *arrays: Any) -> Any:
        """The function on the contract's inputs, in the contract's order (with its declared parameters)."""
        if self.sharded:
            raise TypeError(f"{self.name} is a per-rank function for {self.sharded} meshes; "
                            "run it with fuzz.engines (python -m fuzz runs its sharded rows)")
        return self.function_for(self.contract)(*arrays)

    def function_for(self, contract: Contract) -> Callable[..., Any]:
        """The function for `contract` bound to its declared parameters (a mode, a constant), made once per
        set: a compiled function's caches are per function object."""
        if not contract.parameters:
            return self.function
        return _bound_function(self.function, tuple(contract.bound.items()))

    def bind(self, **parameters: Any) -> Implementation:
        """This built-in with its contract's declared parameters set: `impl.bind(mode="seq-mean-token-mean")`."""
        return replace(self, contract=self.contract.bind(**parameters))

    @property
    def adapter(self) -> Framework:
        return load_framework(self.framework)


@functools.cache
def _bound_function(function: Callable[..., Any], parameters: tuple[tuple[str, Any], ...]) -> Callable[..., Any]:
    bound = functools.partial(function, **dict(parameters))
    functools.update_wrapper(bound, function)  # its name and module, for snippets and reports
    return bound


@dataclass(frozen=True)
class _Spec:
    """A built-in. Devices, dtypes and differentiability default to its framework's; `devices`, `dtypes` and
    `benchmark_devices` narrow them (a device is listed only where the framework sees it). Its module defines
    `function` for `contract`, and may define `compiled_count()`."""

    framework: str
    module: str
    compiled: bool
    contract: str = "magnitude"
    function: str = "sequence_vs_token_normalization"
    devices: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    differentiable: bool | None = None
    benchmark_devices: tuple[str, ...] | None = None
    sharded: str | None = None
    engines: tuple[str, ...] = ()


_BUILTINS: dict[str, dict[str, _Spec]] = {"magnitude": {
    "torch-eager": _Spec("torch", "impls.torch_eager", compiled=False),
    "torch-compile": _Spec("torch", "impls.torch_compile", compiled=True),
    # CPU tensors run through Triton's interpreter: fuzzed there, but its timings measure nothing real.
    "torch-triton": _Spec("torch", "impls.torch_triton", compiled=True, devices=("cpu", "cuda"),
                          differentiable=True, benchmark_devices=("cuda",)),
    # also under jax.jit with its inputs sharded over a mesh: XLA partitions it
    "jax-jit": _Spec("jax", "impls.jax_jit", compiled=True, engines=("jax-plain",)),
    "numpy": _Spec("numpy", "impls.numpy_impl", compiled=False),
    # Written once against the Array API standard, fuzzed on its strict reference namespace (array_api_strict).
    "array-api": _Spec("array-api", "impls.array_api_impl", compiled=False),
    "torch-distributed": _Spec("torch", "impls.torch_distributed", compiled=False, sharded="torch", engines=("torch",)),
    "jax-shard-map": _Spec("jax", "impls.jax_shard_map", compiled=False, sharded="jax", engines=("jax",)),
}, "reduction": {
    "torch-eager": _Spec("torch", "impls.torch_eager_reduction", compiled=False, contract="reduction",
                         function="loss_reduction"),
    "jax-jit": _Spec("jax", "impls.jax_jit_reduction", compiled=True, contract="reduction", function="loss_reduction"),
    "numpy": _Spec("numpy", "impls.numpy_reduction", compiled=False, contract="reduction", function="loss_reduction"),
    "array-api": _Spec("array-api", "impls.array_api_reduction", compiled=False, contract="reduction",
                       function="loss_reduction"),
    "torch-compile": _Spec("torch", "impls.torch_compile_reduction", compiled=True, contract="reduction",
                           function="loss_reduction"),
    "torch-triton": _Spec("torch", "impls.torch_triton_reduction", compiled=True, devices=("cpu", "cuda"),
                          differentiable=True, benchmark_devices=("cuda",), contract="reduction",
                          function="loss_reduction"),
}, "accumulation": {
    # per-chunk losses: called by the accumulation engine on each of a step's micro-batches, with its normalizers
    "torch-eager": _Spec("torch", "impls.torch_eager_accumulation", compiled=False, contract="accumulation",
                         function="chunk_loss", sharded="accumulation", engines=("accumulation",)),
    # the same on real ranks: the step's normalizers all-reduced over the data-parallel group, DDP averaging
    "torch-ddp": _Spec("torch", "impls.torch_eager_accumulation", compiled=False, contract="accumulation",
                       function="chunk_loss_on_ranks", sharded="ddp", engines=("ddp",)),
    # the JAX per-chunk loss under jax.jit, called on each micro-batch as torch-eager is
    "jax-jit": _Spec("jax", "impls.jax_jit_accumulation", compiled=True, contract="accumulation",
                     function="chunk_loss", sharded="accumulation", engines=("accumulation",)),
    # its rank form under jax.shard_map: the step's counts summed over the data axis (lax.psum) on every device
    "jax-shard-map": _Spec("jax", "impls.jax_jit_accumulation", compiled=False, contract="accumulation",
                           function="chunk_loss_on_shards", sharded="jax-accumulation", engines=("jax-accumulation",)),
}}


def builtin_names(contract: str = DEFAULT, sharded: bool = False) -> tuple[str, ...]:
    """The built-ins of a contract: the single-process ones, or with `sharded` the per-rank ones."""
    return tuple(name for name, spec in _BUILTINS.get(contract, {}).items() if (spec.sharded is not None) == sharded)


# The single-process built-ins of the default contract: what the ordinary campaign and the tests call.
BUILTIN_NAMES: tuple[str, ...] = builtin_names()
# Its per-rank built-ins: only fuzz/engines/ runs them (one process per rank, or under shard_map).
SHARDED_NAMES: tuple[str, ...] = builtin_names(sharded=True)
_loaded: dict[tuple[str, str], Implementation] = {}
_failures: dict[tuple[str, str], str] = {}


def _load(name: str, contract: str) -> Implementation:
    spec = _BUILTINS[contract][name]
    adapter = load_framework(spec.framework)
    module = importlib.import_module(spec.module)
    devices = tuple(device for device in adapter.devices() if spec.devices is None or device in spec.devices)
    benchmark_devices = None if spec.benchmark_devices is None else tuple(
        device for device in devices if device in spec.benchmark_devices)
    return Implementation(
        name=name,
        framework=spec.framework,
        function=getattr(module, spec.function),
        contract=get_contract(spec.contract),
        devices=devices,
        dtypes=tuple(d for d in adapter.dtypes if spec.dtypes is None or d in spec.dtypes),
        differentiable=adapter.differentiable if spec.differentiable is None else spec.differentiable,
        compiled=spec.compiled,
        benchmark_devices=benchmark_devices,
        compiled_count=getattr(module, "compiled_count", None),
        sharded=spec.sharded,
        engines=spec.engines,
    )


def get_implementation(name: str, contract: str = DEFAULT) -> Implementation:
    """The built-in `name` of `contract`; raises LookupError if unknown, RuntimeError if unusable here. A contract
    with declared parameters comes with their defaults bound (`.bind(...)` sets them)."""
    if name not in _BUILTINS.get(contract, {}):
        known = ", ".join(_BUILTINS.get(contract, {})) or f"none (the contracts: {', '.join(_BUILTINS)})"
        raise LookupError(f"unknown implementation {name!r} of the {contract} contract; its built-ins are {known}")
    key = (contract, name)
    if key not in _loaded and key not in _failures:
        try:
            _loaded[key] = _load(name, contract)
        except Exception as error:  # a broken install must not break the other frameworks
            _failures[key] = f"{type(error).__name__}: {error}"
    if key in _failures:
        raise RuntimeError(f"implementation {name!r} is unavailable here: {_failures[key]}")
    return _loaded[key]


def builtin_imports(names: Sequence[str], contracts: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The frameworks (adapter names) of the built-ins `names` of `contracts`, and the modules they import besides
    (their own, and a compiled one's compiler), read from the registry without importing anything: what a
    campaign's worker processes import before their first cell."""
    specs = [_BUILTINS[contract][name] for contract in contracts for name in names
             if name in _BUILTINS.get(contract, {})]
    modules = [module for spec in specs
               for module in (spec.module, *(adapter_class(spec.framework).compiler_modules if spec.compiled else ()))]
    return tuple(dict.fromkeys(spec.framework for spec in specs)), tuple(dict.fromkeys(modules))


def available_implementations(contract: str = DEFAULT) -> list[str]:
    """Names of the contract's single-process built-ins usable on this machine, in a fixed order."""
    available = []
    for name in builtin_names(contract):
        try:
            get_implementation(name, contract)
        except RuntimeError:
            continue
        available.append(name)
    return available


def unavailable_implementations(contract: str = DEFAULT) -> dict[str, str]:
    """Each of the contract's built-ins that cannot run here, with the reason."""
    available_implementations(contract)
    return {name: reason for (of, name), reason in _failures.items() if of == contract}
