"""JAX: CPU and GPU devices, contiguous arrays only (JAX arrays have no strides), jax.vjp, jax.jit.

JAX's 64-bit mode is a process-wide default (`jax_enable_x64`); the adapter turns it on only while the
harness builds and calls a float64 case (`jax.enable_x64(True)` is scoped to the block), so a user's
float32 code runs under JAX's ordinary defaults and float64 cells are really float64.

Devices: besides "cpu" (the first host device) and "cuda", "cpu:1" is a second host CPU device where the
process has one (`--xla_force_host_platform_device_count`, read once when JAX starts: `prepare_process`
asks for 2 before the fuzzer imports JAX). Inputs committed to it must give outputs that stay there, so
"outputs on the input's device" is tested on machines without a GPU too.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from impls.frameworks.base import (
    NUMPY_AS_FLOAT64,
    VJP,
    CheckMode,
    Framework,
    Inputs,
    SnippetSyntax,
    cache_folder,
    named_outputs,
    numpy_dtype_expression,
    snippet_outputs,
)
from reference.case import Case
from reference.contract import Contract
from reference.dtypes import numpy_dtype


def _snippet_vjp(contract: Contract) -> tuple[str, ...]:
    """A snippet's backward pass ({function} is the function's name; the cotangent_* globals are float64
    arrays): jax.vjp over the differentiable inputs, the others held fixed."""
    differentiable = [spec.name for spec in contract.differentiable_inputs]
    call = "{function}(" + ", ".join(contract.input_names) + ")"
    return (
        "",
        "def forward_and_backward():",
        f"    def differentiable_part({', '.join(differentiable)}):",
        f"        return {snippet_outputs(contract, call)}",
        f"    out, pullback = jax.vjp(differentiable_part, {', '.join(differentiable)})",
        "    return pullback({{k: jnp.asarray(globals()['cotangent_' + k], dtype=v.dtype)",
        "                     for k, v in out.items()}})",
    )


HOST_DEVICE_FLAG = "--xla_force_host_platform_device_count"
HOST_DEVICES = 2  # "cpu" and "cpu:1"


class JaxFramework(Framework):
    name = "jax"
    array_type = "jax.Array"
    modules = ("jax", "jax.numpy")
    layouts = ("contiguous",)
    layouts_note = "strided layouts n/a: JAX arrays have no strides"
    differentiable = True
    modes = (CheckMode("jax", "jax.jit({})"),)
    floor_name = "jax-sum"
    device_kinds = ("cpu", "cpu:1", "cuda")
    compiles_per_shape = True  # jit, and eager ops too: XLA compiles each op for each new shape

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp

    @classmethod
    def prepare_process(cls, environ: dict[str, str]) -> None:
        # Worker processes share a GPU: JAX must not reserve 75% of its memory in each.
        environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        flags = environ.get("XLA_FLAGS", "")
        if HOST_DEVICE_FLAG not in flags:  # a count the user chose stays
            environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICE_FLAG}={HOST_DEVICES}".strip()
        # XLA's persistent compilation cache, every program however quick to compile: the campaign compiles
        # hundreds of small ones, each worth keeping for the next run (JAX reads these when it starts)
        environ.setdefault("JAX_COMPILATION_CACHE_DIR", cache_folder("jax", environ))
        environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

    def _device(self, name: str) -> Any:
        if name.startswith("cpu"):
            return self.jax.devices("cpu")[int(name.partition(":")[2] or 0)]
        return self.jax.devices("gpu")[0]

    def devices(self) -> list[str]:
        try:
            has_gpu = bool(self.jax.devices("gpu"))
        except RuntimeError:
            has_gpu = False
        second_cpu = ["cpu:1"] if len(self.jax.devices("cpu")) > 1 else []
        return ["cpu", *second_cpu] + (["cuda"] if has_gpu else [])

    @contextlib.contextmanager
    def scope(self, case: Case, *, compiled: bool = False) -> Iterator[None]:
        if case.dtype != "float64":
            yield
            return
        with self.jax.enable_x64(True):
            yield

    def host_values(self, case: Case) -> tuple[np.ndarray, ...]:
        """The inputs as NumPy arrays of the case's dtype (bool for a mask), in the contract's order: what
        `materialize` puts on the case's device, and what a mesh engine puts on its devices' shards straight from
        the host (a device array put on a sharding is sliced by a program compiled for each shape)."""
        if case.layout != "contiguous":
            raise ValueError(f"JAX arrays have no strides: layout {case.layout!r} does not exist")
        dtype = numpy_dtype(case.dtype)
        return tuple(case.values[spec.name] if spec.kind == "bool" else case.values[spec.name].astype(dtype)
                     for spec in case.contract.inputs)

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        values, device = self.host_values(case), self._device(case.device)
        with self.scope(case):  # a float64 array exists only under x64
            return tuple(self.jax.device_put(value, device) for value in values)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.jnp.zeros(shape, dtype=bool if dtype == "bool" else numpy_dtype(dtype))

    @classmethod
    def snippet_syntax(cls, case: Case) -> SnippetSyntax:
        dtype, extra = numpy_dtype_expression(case.dtype)
        x64 = ('jax.config.update("jax_enable_x64", True)  # float64 exists only in 64-bit mode',) \
            if case.dtype == "float64" else ()
        platform = "cpu" if case.device.startswith("cpu") else "gpu"
        index = int(case.device.partition(":")[2] or 0)
        # the device named once, in a helper as short as torch.tensor(: the longest input's name, ` = put(np.array(`,
        # a literal of 40 columns and `, dtype=ml_dtypes.bfloat16))` keep within the terminal's 100 columns
        put = "put(np.array({{values}}, dtype={dtype}))"
        helper = (f"def put(x):  # onto the case's device\n"
                  f"    return jax.device_put(x, jax.devices({platform!r})[{index}])")
        # a second host device exists only if XLA is told so before JAX starts
        hosts = ("import os", f"os.environ['XLA_FLAGS'] = os.environ.get('XLA_FLAGS', '') + "
                 f"' {HOST_DEVICE_FLAG}={HOST_DEVICES}'") if index else ()
        return SnippetSyntax(
            (*hosts, "import jax", *x64, "import jax.numpy as jnp", "import numpy as np", *extra),
            put.format(dtype=dtype), put.format(dtype="bool"), None,
            NUMPY_AS_FLOAT64, ("ArrayImpl", "Array"), vjp=_snippet_vjp(case.contract), helpers=(helper,))

    def is_array(self, value: object) -> bool:
        return isinstance(value, self.jax.Array)

    def device_of(self, value: Any) -> str:
        devices = value.devices()
        device = next(iter(devices))
        if device.platform != "cpu":
            return "cuda"
        if len(devices) > 1:  # sharded over a mesh of host devices (fuzz/engines): the kind is the device
            return "cpu"
        index = self.jax.devices("cpu").index(device)
        return "cpu" if index == 0 else f"cpu:{index}"

    def to_float64(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(np.float64)

    def wrap(self, fn: Callable, mode: str, contract: Contract) -> Callable:
        # A per-chunk function's keywords are Python ints (the step's normalizers, new in every step): jit with them
        # static would compile a program for each step's counts, which no JAX trainer does (it jits the step
        # around the call), and traced they would not be Python ints. Such a function is called as it is: each
        # op dispatched to its XLA kernel, compiled once per shape (the in-process engine buckets the shapes).
        return fn if contract.keywords else self.jax.jit(fn)

    def wrap_text(self, mode: CheckMode, contract: Contract) -> str | None:
        return None if contract.keywords else mode.wrap

    def synchronize(self, value: Any) -> None:
        self.jax.block_until_ready(value)

    @functools.lru_cache(maxsize=64)  # noqa: B019  (adapters live for the whole process)
    def _jitted_vjp(self, fn: Callable, contract: Contract) -> Callable:
        """jax.vjp of fn under jit: forward and backward compile once per shape, together."""
        return self.jax.jit(self._vjp(fn, contract, jitted=True))

    def _vjp(self, fn: Callable, contract: Contract, jitted: bool) -> Callable:
        """(arguments, cotangents) -> (outputs, gradients): jax.vjp of fn over the contract's differentiable
        inputs, the others held fixed; `jitted` when it is traced into one program with its backward."""
        positions = [index for index, spec in enumerate(contract.inputs) if spec.differentiable]

        def forward_and_backward(arguments: tuple[Any, ...], cotangents: Any) -> Any:
            def differentiable_part(*varied: Any) -> dict[str, Any]:
                full = list(arguments)
                for index, value in zip(positions, varied):
                    full[index] = value
                outputs = named_outputs(contract, fn(*full))
                return {key: outputs[key] for key in contract.output_names}  # a plain dict: any Mapping in

            outputs, pullback = self.jax.vjp(differentiable_part, *[arguments[i] for i in positions])
            # The backward reads what the forward saved (the pullback's leaves) through an optimization barrier, as
            # it would read them if the two ran as separate programs: in one program XLA rewrites a product with a
            # converted mask into a select, which drops the NaN a where-guarded 0 / 0 sends there (on CPU, in every
            # dtype but bfloat16), and that loss gives NaN gradients wherever its backward runs apart from its
            # forward (tests/corpus/reductions/jax_mask_product_where_guard_nan_gradient.py).
            # Called eagerly, the forward's results are already computed arrays and the barrier would be a program
            # of its own, compiled for every shape: there it is left out.
            if jitted:
                saved, structure = self.jax.tree.flatten(pullback)
                pullback = self.jax.tree.unflatten(structure, self.jax.lax.optimization_barrier(saved))
            return outputs, pullback({key: self.jnp.asarray(cotangents[key]).astype(value.dtype)
                                      for key, value in outputs.items()})

        return forward_and_backward

    def vjp(self, fn: Callable, inputs: Inputs, cotangents: dict[str, np.ndarray], contract: Contract,
            keywords: dict[str, Any] | None = None) -> VJP:
        # float64 cotangents, uncommitted (jit puts them where the inputs are, on one device or a mesh), converted to
        # each output's dtype inside (only under x64 do they stay float64)
        host = {key: np.asarray(value, dtype=np.float64) for key, value in cotangents.items()}
        if keywords:  # Python ints, different in every example: jax.vjp as it is, fn's own jit compiling per shape
            result, grads = self._vjp(functools.partial(fn, **keywords), contract, jitted=False)(tuple(inputs), host)
        else:
            result, grads = self._jitted_vjp(fn, contract)(tuple(inputs), host)
        names = [spec.name for spec in contract.differentiable_inputs]
        # the outputs in the contract's structure, as the function returned them: the traced function hands jax.vjp
        # a plain dict of them, whatever its own result was (a single array where the contract returns one)
        returned = result if contract.returns_mapping else result[contract.output_names[0]]
        return VJP(returned, dict(zip(names, grads)))

    def floor_kernel(self, device: str, elements: int) -> Callable[[], object]:
        data = self.jax.device_put(np.full(elements, 1.0, dtype=np.float32), self._device(device))
        total = self.jax.jit(self.jnp.sum)
        return lambda: total(data).block_until_ready()

    def compile_counter(self, function: Callable) -> Callable[[], int]:
        """A jitted function counts its own cache; code that never compiles counts 0."""
        cache_size = getattr(function, "_cache_size", None)
        return (lambda: int(cache_size())) if cache_size is not None else (lambda: 0)


ADAPTER = JaxFramework
