"""PyTorch: CPU and CUDA, every layout but negative strides (torch has none), autograd, torch.compile.

Owns the fuzzer's policy for compiled torch code: a user's function under `check --framework torch-compile`
is compiled with unbacked sizes first (fewest recompiles) and plainly where inductor cannot do that; and
while the harness calls compiled code, dynamo's recompile limit is raised and hitting it is an error
(`fail_on_recompile_limit_hit`), so a fuzzed function never silently runs eager. Those two settings are
dynamo's global config, applied with `torch._dynamo.config.patch` only around the harness's calls: a
trainer that imports the built-ins keeps its own.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from impls.frameworks.base import (
    VJP,
    CheckMode,
    Framework,
    Inputs,
    InputSnapshot,
    SnippetSyntax,
    cache_folder,
    dtype_text,
    named_outputs,
    snippet_outputs,
)
from impls.layouts import STRIDED_LAYOUTS_WITHOUT_NEGATIVE, strided_view
from reference.case import Case
from reference.contract import Contract

# 4 dtypes x 5 stride patterns x 2 count dtypes x {inference, autograd} x 2 devices stays below this, and
# so does a user's function compiled plainly (sizes 0 and 1 specialized) under `check`.
RECOMPILE_LIMIT = 256
COMPILE_MODE = "torch-compile"


def _snippet_vjp(contract: Contract) -> tuple[str, ...]:
    """A snippet's backward pass ({function} is the function's name; the cotangent_* globals are float64 arrays):
    torch.autograd.grad of the outputs that require grad, None for an input no output reaches."""
    differentiable = ", ".join(spec.name for spec in contract.differentiable_inputs)
    return (
        *[f"{spec.name}.requires_grad_(True)" for spec in contract.differentiable_inputs],
        "",
        "def forward_and_backward():",
        f"    out = {snippet_outputs(contract, '{function}(' + ', '.join(contract.input_names) + ')')}",
        f"    keys = {list(contract.output_names)!r}",
        "    keys = [k for k in keys if out[k].requires_grad]",
        f"    inputs = [{differentiable}]",
        "    if not keys:",
        "        return [None] * len(inputs)",
        "    cotangents = [torch.tensor(globals()['cotangent_' + k]).to(out[k]) for k in keys]",
        "    return torch.autograd.grad([out[k] for k in keys], inputs, cotangents, allow_unused=True)",
    )


class TorchFramework(Framework):
    name = "torch"
    array_type = "torch.Tensor"
    # autograd imports its symbolic shapes (and sympy: half a second) at a process's first backward with given
    # cotangents, as every VJP here has: once in the server that workers and ranks fork from, not in each of them
    modules = ("torch", "torch.fx.experimental.symbolic_shapes")
    compiler_modules = ("torch._dynamo", "torch._inductor.compile_fx", "impls.frameworks.torch_compiler_warmup")
    layouts = STRIDED_LAYOUTS_WITHOUT_NEGATIVE
    layouts_note = "negative strides n/a: torch has none"
    differentiable = True
    modes = (CheckMode("torch"), CheckMode(COMPILE_MODE, "torch.compile({}, fullgraph=True, dynamic=True)"))
    floor_name = "torch-sum"
    device_kinds = ("cpu", "cuda")
    # torch.compile's backend (inductor, the C++ compiler) failing on an input: PyTorch 2.13's CPU inductor
    # does on float16 reductions over transposed inputs.
    compiler_errors = ("InductorError", "BackendCompilerFailed", "CppCompileError", "CompilationError")
    compiler_label = "torch.compile failed to compile this input"

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def devices(self) -> list[str]:
        return ["cpu"] + (["cuda"] if self.torch.cuda.is_available() else [])

    def _tensor(self, values: np.ndarray, dtype: Any, layout: str, poison: object, device: str) -> Any:
        view = strided_view(values, layout, poison)
        buffer = self.torch.tensor(view.buffer, dtype=dtype, device=device)
        return buffer.as_strided(view.shape, view.strides, view.offset)

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        tensors = []
        for spec in case.contract.inputs:
            dtype = self.torch.bool if spec.kind == "bool" else getattr(self.torch, case.dtype)
            tensor = self._tensor(case.values[spec.name], dtype, case.layout, spec.poison, case.device)
            tensors.append(tensor.requires_grad_(True) if requires_grad and spec.differentiable else tensor)
        return tuple(tensors)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.zeros(shape, dtype=getattr(self.torch, dtype))

    @contextlib.contextmanager
    def scope(self, case: Case, *, compiled: bool = False) -> Iterator[None]:
        if not compiled:
            yield
            return
        config = self.torch._dynamo.config
        with config.patch(fail_on_recompile_limit_hit=True,
                          recompile_limit=max(config.recompile_limit, RECOMPILE_LIMIT)):
            yield

    @classmethod
    def prepare_process(cls, environ: dict[str, str]) -> None:
        # inductor's caches (FX graphs, kernels, compiled autograd) in the user's cache folder, not /tmp: a
        # second run, or the next day's, reuses the compiled code
        environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache_folder("inductor", environ))

    @classmethod
    def snippet_syntax(cls, case: Case) -> SnippetSyntax:
        device = f", device={case.device!r}" if case.device != "cpu" else ""
        return SnippetSyntax(
            ("import torch",), f"torch.tensor({{values}}, dtype=torch.{case.dtype}{device})",
            f"torch.tensor({{values}}, dtype=torch.bool{device})",
            # the view on a line of its own, so that a buffer's literal and it keep within a terminal's width
            "(\n    {buffer}\n    .as_strided({shape}, {strides}, {offset}))",
            "(np.asarray(x.detach().to('cpu', torch.float64)) if isinstance(x, torch.Tensor)\n"
            "            else np.asarray(x, dtype=np.float64))",
            ("Tensor",), counts_writes=True, vjp=_snippet_vjp(case.contract))

    def is_array(self, value: object) -> bool:
        return isinstance(value, self.torch.Tensor)

    def dtype_of(self, value: Any) -> str:
        return dtype_text(value.dtype).removeprefix("torch.")

    def device_of(self, value: Any) -> str:
        return value.device.type

    def to_float64(self, value: Any) -> np.ndarray:
        return value.detach().to("cpu", self.torch.float64).numpy()

    def to_bool(self, value: Any) -> np.ndarray:
        return value.detach().cpu().numpy().astype(bool)

    def snapshot(self, inputs: Inputs) -> InputSnapshot:
        return InputSnapshot(super().snapshot(inputs).values, tuple(x._version for x in inputs))

    def wrap(self, fn: Callable, mode: str, contract: Contract) -> Callable:
        return compile_for_fuzzing(fn, contract) if mode == COMPILE_MODE else fn

    def synchronize(self, value: Any) -> None:
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()

    def vjp(self, fn: Callable, inputs: Inputs, cotangents: dict[str, np.ndarray], contract: Contract,
            keywords: dict[str, Any] | None = None) -> VJP:
        result = fn(*inputs, **(keywords or {}))
        outputs = named_outputs(contract, result)
        tracked = [key for key in contract.output_names
                   if isinstance(outputs[key], self.torch.Tensor) and outputs[key].requires_grad]
        positions = [index for index, spec in enumerate(contract.inputs) if spec.differentiable]
        grads: list[Any] = [None] * len(positions)
        if tracked:
            grads = list(self.torch.autograd.grad(
                [outputs[key] for key in tracked],
                [inputs[index] for index in positions],
                grad_outputs=[self.torch.tensor(cotangents[key], dtype=outputs[key].dtype, device=outputs[key].device)
                              for key in tracked],
                allow_unused=True,  # an input no output reaches: None, which the checks report as such
            ))
        detached = tuple(key for key in contract.output_names if key not in tracked)
        return VJP(result, {contract.inputs[i].name: g for i, g in zip(positions, grads)}, detached)

    def floor_kernel(self, device: str, elements: int) -> Callable[[], object]:
        data = self.torch.full((elements,), 1.0, dtype=self.torch.float32, device=device)
        if device == "cpu":
            return data.sum

        def call() -> object:
            total = data.sum()
            self.torch.cuda.synchronize()
            return total

        return call

    def compile_counter(self, function: Callable) -> Callable[[], int]:
        from torch._dynamo.utils import counters

        return lambda: int(counters["stats"]["unique_graphs"])


def _is_data_dependent_guard(error: BaseException | None) -> bool:
    while error is not None:
        if "GuardOnDataDependentSymNode" in f"{type(error).__name__}: {error}":
            return True
        error = error.__cause__ or error.__context__
    return False


def compile_for_fuzzing(fn: Callable[..., Any], contract: Contract) -> Callable[..., Any]:
    """A user's function under torch.compile(fullgraph=True, dynamic=True), as cheaply as it allows.

    Unbacked sizes first (fewest recompiles: impls/torch_compile.py's technique); code that inductor cannot
    compile with unbacked sizes (it raises GuardOnDataDependentSymNode, e.g. on `torch.zeros_like`) is
    switched, for good, to a plain dynamic compile, which specializes sizes 0 and 1 and so compiles more
    often, but is what users run."""
    import torch

    from impls.torch_compile import compile_with_unbacked_sizes

    unbacked = compile_with_unbacked_sizes(fn, tuple(spec.dims for spec in contract.inputs))
    plain = torch.compile(fn, fullgraph=True, dynamic=True)
    use_plain = False

    @functools.wraps(fn)
    def call(*tensors: Any, **keywords: Any) -> Any:  # keywords: a per-chunk function's step normalizers
        nonlocal use_plain
        if not use_plain:
            try:
                return unbacked(*tensors, **keywords)
            except Exception as error:
                if not _is_data_dependent_guard(error):
                    raise
                use_plain = True
        return plain(*tensors, **keywords)

    return call


ADAPTER = TorchFramework
