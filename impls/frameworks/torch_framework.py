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

from impls.case import Case
from impls.frameworks.base import CheckMode, Framework, Inputs, InputSnapshot, SnippetSyntax
from impls.layouts import STRIDED_LAYOUTS_WITHOUT_NEGATIVE, strided_view

# 4 dtypes x 5 stride patterns x 2 count dtypes x {inference, autograd} x 2 devices stays below this, and
# so does a user's function compiled plainly (sizes 0 and 1 specialized) under `check`.
RECOMPILE_LIMIT = 256
COMPILE_MODE = "torch-compile"


# A snippet's backward pass ({function} is the function's name; the cotangent_* globals are float64 arrays).
SNIPPET_VJP = (
    "token_log_probs.requires_grad_(True)",
    "advantages.requires_grad_(True)",
    "",
    "def forward_and_backward():",
    "    out = {function}(token_log_probs, advantages, token_mask)",
    "    keys = [k for k in ['sequence_summed', 'token_averaged', 'magnitude_ratio'] if out[k].requires_grad]",
    "    grads = torch.autograd.grad(",
    "        [out[k] for k in keys], [token_log_probs, advantages], allow_unused=True,",
    "        grad_outputs=[torch.tensor(globals()['cotangent_' + k], dtype=out[k].dtype, device=out[k].device)",
    "                      for k in keys])",
    "    inputs = (token_log_probs, advantages)",
    "    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]",
)


class TorchFramework(Framework):
    name = "torch"
    array_type = "torch.Tensor"
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
        dtype = getattr(self.torch, case.dtype)
        log_probs = self._tensor(case.token_log_probs, dtype, case.layout, np.nan, case.device)
        advantages = self._tensor(case.advantages, dtype, case.layout, np.nan, case.device)
        mask = self._tensor(case.token_mask, self.torch.bool, case.layout, True, case.device)
        if requires_grad:
            log_probs.requires_grad_(True)
            advantages.requires_grad_(True)
        return log_probs, advantages, mask

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
    def snippet_syntax(cls, case: Case) -> SnippetSyntax:
        device = f", device={case.device!r}" if case.device != "cpu" else ""
        return SnippetSyntax(
            ("import torch",), f"torch.tensor({{values}}, dtype=torch.{case.dtype}{device})",
            f"torch.tensor({{values}}, dtype=torch.bool{device})", "{buffer}.as_strided({shape}, {strides}, {offset})",
            "np.asarray(x.detach().to('cpu', torch.float64)) if isinstance(x, torch.Tensor) "
            "else np.asarray(x, dtype=np.float64)",
            ("Tensor",), counts_writes=True, vjp=SNIPPET_VJP)

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

    def snapshot(self, inputs: Inputs) -> InputSnapshot:
        return InputSnapshot(super().snapshot(inputs).values, tuple(x._version for x in inputs))

    def wrap(self, fn: Callable, mode: str) -> Callable:
        return compile_for_fuzzing(fn) if mode == COMPILE_MODE else fn

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


def compile_for_fuzzing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A user's function under torch.compile(fullgraph=True, dynamic=True), as cheaply as it allows.

    Unbacked sizes first (fewest recompiles: impls/torch_compile.py's technique); code that inductor cannot
    compile with unbacked sizes (it raises GuardOnDataDependentSymNode, e.g. on `torch.zeros_like`) is
    switched, for good, to a plain dynamic compile, which specializes sizes 0 and 1 and so compiles more
    often, but is what users run."""
    import torch

    from impls.torch_compile import compile_with_unbacked_sizes

    unbacked = compile_with_unbacked_sizes(fn)
    plain = torch.compile(fn, fullgraph=True, dynamic=True)
    use_plain = False

    @functools.wraps(fn)
    def call(*tensors: Any) -> Any:
        nonlocal use_plain
        if not use_plain:
            try:
                return unbacked(*tensors)
            except Exception as error:
                if not _is_data_dependent_guard(error):
                    raise
                use_plain = True
        return plain(*tensors)

    return call


ADAPTER = TorchFramework
