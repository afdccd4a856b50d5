"""The canonical PyTorch implementation under `torch.compile(fullgraph=True, dynamic=True)`.

Validation runs eagerly (it reads metadata only); the computation is one compiled graph. Sizes are marked
unbacked for the call (the marks are removed afterwards), so batch or tokens of 0 or 1 reuse the general
graph instead of each compiling its own; only dtype, device and stride pattern
(contiguous, transposed, strided, expanded) compile anew. `fail_on_recompile_limit_hit` makes hitting the
recompile limit an error: it can never silently run eager.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo

from impls.torch_eager import normalize, validate

# 4 dtypes x 4 stride patterns x {inference, autograd} x 2 devices stays below this, and so does a
# user's function compiled plainly (sizes 0 and 1 specialized) under `python -m fuzz check`.
RECOMPILE_LIMIT = 256

torch._dynamo.config.fail_on_recompile_limit_hit = True
torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)

def compile_with_unbacked_sizes(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.compile(fn, fullgraph=True, dynamic=True)`, called with every size marked unbacked.

    The marks are Python attributes on the tensor objects; they are removed after the call, so the
    caller's tensors come back as they were. (Marking a fresh `.view` alias instead makes dynamo guard on
    the alias's `_base`, which costs extra recompiles.)"""
    compiled = torch.compile(fn, fullgraph=True, dynamic=True)

    @functools.wraps(fn)
    def call(*tensors: torch.Tensor) -> Any:
        marked = []
        for tensor in tensors:
            before = set(tensor.__dict__)
            for dim in range(tensor.dim()):
                torch._dynamo.decorators.mark_unbacked(tensor, dim)
            marked.append((tensor, set(tensor.__dict__) - before))
        try:
            return compiled(*tensors)
        finally:
            for tensor, names in marked:
                for name in names:
                    delattr(tensor, name)

    return call


def _is_data_dependent_guard(error: BaseException | None) -> bool:
    while error is not None:
        if "GuardOnDataDependentSymNode" in f"{type(error).__name__}: {error}":
            return True
        error = error.__cause__ or error.__context__
    return False


def compile_for_fuzzing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A user's function under torch.compile(fullgraph=True, dynamic=True), as cheaply as it allows.

    Unbacked sizes first (fewest recompiles); code that inductor cannot compile with unbacked sizes (it
    raises GuardOnDataDependentSymNode, e.g. on `torch.zeros_like`) is switched, for good, to a plain
    dynamic compile, which specializes sizes 0 and 1 and so compiles more often, but is what users run."""
    unbacked = compile_with_unbacked_sizes(fn)
    plain = torch.compile(fn, fullgraph=True, dynamic=True)
    use_plain = False

    @functools.wraps(fn)
    def call(*tensors: torch.Tensor) -> Any:
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


def sequence_vs_token_normalization(
    token_log_probs: torch.Tensor, advantages: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    validate(token_log_probs, advantages, token_mask)
    return compiled_normalize(token_log_probs, advantages, token_mask)


compiled_normalize = compile_with_unbacked_sizes(normalize)
