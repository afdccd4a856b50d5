"""One small adapter per framework, in the spirit of einops' backends: each imports its framework only
when first used, so a missing or broken framework never breaks the others.

An adapter turns a framework-neutral Case into native inputs (dtype, device, layout), reads native
outputs back to float64, snapshots inputs to prove they were not modified, wraps a function for
compilation, and computes vector-Jacobian products where the framework has autograd.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from impls.case import Case
from impls.dtypes import dtype_name, numpy_dtype
from impls.layouts import LAYOUTS, STRIDED_LAYOUTS_WITHOUT_NEGATIVE, numpy_view, strided_view

Inputs = tuple[Any, Any, Any]


class Framework:
    name: str = ""
    array_type: str = ""
    layouts: tuple[str, ...] = ("contiguous",)
    differentiable: bool = False

    def devices(self) -> list[str]:
        return ["cpu"]

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        raise NotImplementedError

    def is_array(self, value: object) -> bool:
        raise NotImplementedError

    def dtype_of(self, value: Any) -> str:
        return dtype_name(value.dtype)

    def device_of(self, value: Any) -> str:
        return "cpu"

    def to_float64(self, value: Any) -> np.ndarray:
        raise NotImplementedError

    def snapshot(self, inputs: Inputs) -> Any:
        return [self.to_float64(x) if self.dtype_of(x) != "bool" else self.to_bool(x) for x in inputs]

    def to_bool(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(bool)

    def changes(self, inputs: Inputs, snapshot: Any) -> list[str]:
        """Names of the inputs whose values differ from the snapshot."""
        names = ("token_log_probs", "advantages", "token_mask")
        changed = []
        for name, value, before in zip(names, inputs, snapshot):
            after = self.to_bool(value) if before.dtype == bool else self.to_float64(value)
            if not np.array_equal(after, before, equal_nan=True):
                changed.append(f"{name} was modified in place")
        return changed

    def compile(self, fn: Callable) -> Callable:
        return fn

    def synchronize(self, value: Any) -> None:
        """Wait until `value` (any pytree of arrays) is computed; used by benchmarks."""

    def vjp(self, fn: Callable, inputs: Inputs, cotangents: dict[str, np.ndarray]) -> tuple[Any, Any, Any]:
        """(outputs, d token_log_probs, d advantages) for float64 cotangents of all three outputs."""
        raise NotImplementedError(f"{self.name} has no autograd")


class NumpyFramework(Framework):
    name = "numpy"
    array_type = "numpy.ndarray"
    layouts = LAYOUTS

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        dtype = numpy_dtype(case.dtype)
        log_probs = numpy_view(strided_view(case.token_log_probs.astype(dtype), case.layout, np.nan))
        advantages = numpy_view(strided_view(case.advantages.astype(dtype), case.layout, np.nan))
        mask = numpy_view(strided_view(case.token_mask, case.layout, True))
        return log_probs, advantages, mask

    def is_array(self, value: object) -> bool:
        return isinstance(value, np.ndarray)

    def to_float64(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(np.float64)


class TorchFramework(Framework):
    name = "torch"
    array_type = "torch.Tensor"
    layouts = STRIDED_LAYOUTS_WITHOUT_NEGATIVE  # torch has no negative strides
    differentiable = True

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def devices(self) -> list[str]:
        return ["cpu"] + (["cuda"] if self.torch.cuda.is_available() else [])

    def _dtype(self, name: str) -> Any:
        return getattr(self.torch, name)

    def _tensor(self, values: np.ndarray, dtype: Any, layout: str, poison: object, device: str) -> Any:
        view = strided_view(values, layout, poison)
        buffer = self.torch.tensor(view.buffer, dtype=dtype, device=device)
        return buffer.as_strided(view.shape, view.strides, view.offset)

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        dtype = self._dtype(case.dtype)
        log_probs = self._tensor(case.token_log_probs, dtype, case.layout, np.nan, case.device)
        advantages = self._tensor(case.advantages, dtype, case.layout, np.nan, case.device)
        mask = self._tensor(case.token_mask, self.torch.bool, case.layout, True, case.device)
        if requires_grad:
            log_probs.requires_grad_(True)
            advantages.requires_grad_(True)
        return log_probs, advantages, mask

    def is_array(self, value: object) -> bool:
        return isinstance(value, self.torch.Tensor)

    def dtype_of(self, value: Any) -> str:
        return str(value.dtype).removeprefix("torch.")

    def device_of(self, value: Any) -> str:
        return value.device.type

    def to_float64(self, value: Any) -> np.ndarray:
        return value.detach().to("cpu", self.torch.float64).numpy()

    def to_bool(self, value: Any) -> np.ndarray:
        return value.detach().cpu().numpy().astype(bool)

    def snapshot(self, inputs: Inputs) -> Any:
        return [*super().snapshot(inputs), [x._version for x in inputs]]

    def changes(self, inputs: Inputs, snapshot: Any) -> list[str]:
        changed = super().changes(inputs, snapshot[:3])
        names = ("token_log_probs", "advantages", "token_mask")
        for name, value, version in zip(names, inputs, snapshot[3]):
            if value._version != version and f"{name} was modified in place" not in changed:
                changed.append(f"{name} was written in place (its version counter moved)")
        return changed

    def compile(self, fn: Callable) -> Callable:
        from impls.torch_compile import compile_for_fuzzing

        return compile_for_fuzzing(fn)

    def synchronize(self, value: Any) -> None:
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()

    def vjp(self, fn: Callable, inputs: Inputs, cotangents: dict[str, np.ndarray]) -> tuple[Any, Any, Any]:
        log_probs, advantages, _ = inputs
        outputs = fn(*inputs)
        keys = [key for key in cotangents if outputs[key].requires_grad]
        grads = [None, None]
        if keys:
            grads = self.torch.autograd.grad(
                [outputs[key] for key in keys],
                [log_probs, advantages],
                grad_outputs=[
                    self.torch.tensor(cotangents[key], dtype=outputs[key].dtype, device=outputs[key].device)
                    for key in keys
                ],
                allow_unused=True,
            )
        return outputs, *[self.torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


class JaxFramework(Framework):
    name = "jax"
    array_type = "jax.Array"
    layouts = ("contiguous",)  # JAX arrays have no strides
    differentiable = True

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        import impls.jax_jit  # noqa: F401  (enables x64 before any array is made)

        self.jax, self.jnp = jax, jnp

    def _device(self, name: str) -> Any:
        return self.jax.devices("cpu" if name == "cpu" else "gpu")[0]

    def devices(self) -> list[str]:
        try:
            has_gpu = bool(self.jax.devices("gpu"))
        except RuntimeError:
            has_gpu = False
        return ["cpu"] + (["cuda"] if has_gpu else [])

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        if case.layout != "contiguous":
            raise ValueError(f"JAX arrays have no strides: layout {case.layout!r} does not exist")
        device = self._device(case.device)
        dtype = numpy_dtype(case.dtype)
        return (
            self.jax.device_put(case.token_log_probs.astype(dtype), device),
            self.jax.device_put(case.advantages.astype(dtype), device),
            self.jax.device_put(case.token_mask, device),
        )

    def is_array(self, value: object) -> bool:
        return isinstance(value, self.jax.Array)

    def device_of(self, value: Any) -> str:
        platform = next(iter(value.devices())).platform
        return "cpu" if platform == "cpu" else "cuda"

    def to_float64(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(np.float64)

    def compile(self, fn: Callable) -> Callable:
        return self.jax.jit(fn)

    def synchronize(self, value: Any) -> None:
        self.jax.block_until_ready(value)

    @functools.lru_cache(maxsize=64)  # noqa: B019  (adapters live for the whole process)
    def _jitted_vjp(self, fn: Callable) -> Callable:
        """jax.vjp of fn under jit: forward and backward compile once per shape, together."""

        def forward_and_backward(log_probs: Any, advantages: Any, mask: Any, cotangents: Any) -> Any:
            outputs, pullback = self.jax.vjp(lambda lp, adv: fn(lp, adv, mask), log_probs, advantages)
            return outputs, *pullback({key: cotangents[key].astype(value.dtype) for key, value in outputs.items()})

        return self.jax.jit(forward_and_backward)

    def vjp(self, fn: Callable, inputs: Inputs, cotangents: dict[str, np.ndarray]) -> tuple[Any, Any, Any]:
        log_probs, advantages, mask = inputs
        device = next(iter(log_probs.devices()))
        on_device = {key: self.jax.device_put(np.asarray(value, dtype=np.float64), device)
                     for key, value in cotangents.items()}
        outputs, grad_log_probs, grad_advantages = self._jitted_vjp(fn)(log_probs, advantages, mask, on_device)
        return outputs, grad_log_probs, grad_advantages


_FRAMEWORK_CLASSES: dict[str, type[Framework]] = {
    "numpy": NumpyFramework,
    "torch": TorchFramework,
    "jax": JaxFramework,
}


@functools.cache
def load_framework(name: str) -> Framework:
    """The adapter for `name`, importing the framework on first use. Raises whatever the import raises."""
    return _FRAMEWORK_CLASSES[name]()


FRAMEWORK_NAMES: tuple[str, ...] = tuple(_FRAMEWORK_CLASSES)
