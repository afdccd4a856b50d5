"""What every framework adapter answers: the one interface the fuzzer, the benchmarks and the tests use, so
that nothing outside an adapter asks which framework it holds.

An adapter reports facts (native inputs for a Case, values read back, snapshots of the inputs, devices, a
compile counter, a floor kernel); judging those facts (what counts as modified, the messages) is the
fuzzer's job (fuzz/judge/). It knows no function's names: the case's contract (reference/contract.py) says
what the inputs and outputs are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from reference.case import Case
from reference.contract import Contract
from reference.dtypes import DTYPE_NAMES

Inputs = tuple[Any, ...]  # one native array per contract input, in the contract's order


@dataclass(frozen=True)
class InputSnapshot:
    """The inputs' values (float64, or bool for a mask) and, where the framework counts them, how many
    times each was written to (torch's version counters); None where it does not."""

    values: tuple[np.ndarray, ...]
    write_counts: tuple[int, ...] | None = None


@dataclass(frozen=True)
class VJP:
    """What a backward pass gave: the function's result in the contract's structure (as it returned it; JAX, which
    traces it, hands back its outputs as arrays in that structure), each differentiable input's
    gradient (None where no output carries a gradient to it: the graph is cut), and the outputs that carry no
    gradient at all (detached, computed without autograd); a framework that cannot tell says none."""

    result: Any
    gradients: dict[str, Any]
    detached: tuple[str, ...] = ()


@dataclass(frozen=True)
class SnippetSyntax:
    """How a runnable snippet writes this framework's arrays for one case: pure strings, so that a process that
    never imported the framework (the parent of the fuzzer's workers) can write snippets too.

    Templates: `float_array` and `bool_array` take {values} (a nested list literal) and give a contiguous
    array of the case's dtype on its device; `strided` takes {buffer}, {shape}, {strides}, {offset},
    {byte_strides} and {writeable} and views a 1-D buffer in a layout (None where arrays have no strides:
    then an empty array is `reshape` of it, {buffer} to {shape}); `as_float64` converts `x` to a float64 NumPy
    array. `vjp` defines `forward_and_backward()` for `{function}` from the cotangent_* globals; it returns
    one gradient per differentiable input, None for one the outputs carry no gradient to. `helpers` define what
    the templates call, after the function's own lines (a function of the same name defined there, and let go
    under a name of its own, leaves them bound)."""

    imports: tuple[str, ...]
    float_array: str
    bool_array: str
    strided: str | None
    as_float64: str
    type_names: tuple[str, ...]  # what type(output).__name__ may be
    counts_writes: bool = False  # inputs have `_version` counters
    vjp: tuple[str, ...] = ()
    reshape: str = "{buffer}.reshape({shape})"  # where arrays have no strides: an empty array's shape
    helpers: tuple[str, ...] = ()


NUMPY_AS_FLOAT64 = "np.asarray(x, dtype=np.float64)"
# over two lines (inside the call's brackets), so that `name = <this>` stays within a terminal's width
NUMPY_STRIDED = ("np.lib.stride_tricks.as_strided(\n    {buffer}[{offset}:],\n    {shape}, {byte_strides}, "
                 "writeable={writeable})")


def numpy_dtype_expression(dtype: str) -> tuple[str, tuple[str, ...]]:
    """The NumPy dtype of a name as Python (bfloat16 from ml_dtypes), and the imports it needs."""
    if dtype == "bfloat16":
        return "ml_dtypes.bfloat16", ("import ml_dtypes",)
    return f"np.{dtype}", ()


def snippet_outputs(contract: Contract, result: str) -> str:
    """Python for `{output: value}` of a result named `result`: the mapping itself, or a one-entry dict; as a
    format template (SnippetSyntax.vjp's lines are: a dict's braces doubled)."""
    return result if contract.returns_mapping else f"{{{{{contract.outputs[0].name!r}: {result}}}}}"


def named_outputs(contract: Contract, result: Any) -> Mapping[str, Any]:
    """The result as {output: value} for a backward pass; TypeError where it is not the contract's structure
    (a backward cannot start from it)."""
    named = contract.outputs_of(result)
    if named is None or any(name not in named for name in contract.output_names):
        raise TypeError(f"returned {type(result).__name__}, expected {contract.expected_result}")
    return named


@dataclass(frozen=True)
class CheckMode:
    """How `check --framework NAME` runs a user's function: as given, or wrapped for compilation."""

    name: str  # the --framework choice: "torch", "torch-compile", "jax", ...
    wrap: str | None = None  # the wrapping as Python, the function as {}: "jax.jit({})"


_DTYPE_TEXT: dict[tuple[type, Any], str] = {}


def dtype_text(dtype: Any) -> str:
    """`str(dtype)`, remembered per dtype object: the judge reads every output's and input's dtype on every call,
    and NumPy builds the name anew each time. The key holds the dtype's type first, so two libraries' dtypes of
    equal hash are never compared with each other (array_api_strict warns on every such comparison)."""
    key = (type(dtype), dtype)
    try:
        return _DTYPE_TEXT[key]
    except KeyError:
        text = _DTYPE_TEXT[key] = str(dtype)
        return text
    except TypeError:  # an unhashable dtype object
        return str(dtype)


class Framework:
    """Base class of the adapters; each framework's module subclasses it and imports its framework only in
    `__init__` and its methods, so listing the adapters imports nothing."""

    name: str = ""
    array_type: str = ""  # what the contract's arrays are, for messages: "torch.Tensor"
    output_type: str = ""  # what an output may be, for messages, where more than array_type: NumPy scalars
    # the modules a fresh process imports to use it, all at once (worker processes are forked from a server that
    # imported them: fuzz/run/workers.py); importing them must start no thread and initialize no device
    modules: tuple[str, ...] = ()
    # what its compiled code imports besides, at its first compile (torch.compile's dynamo and inductor, seconds):
    # imported with `modules` where a run has compiled code
    compiler_modules: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ("contiguous",)  # the layouts it can build (impls/layouts.py)
    layouts_note: str | None = None  # why some layouts do not exist here, for the matrix
    dtypes: tuple[str, ...] = DTYPE_NAMES
    differentiable: bool = False
    modes: tuple[CheckMode, ...] = ()
    device_kinds: tuple[str, ...] = ("cpu",)  # every device it can ever have (devices() says which are here)
    compiler_errors: tuple[str, ...] = ()  # exception names its compiler raises when it fails on an input
    compiler_label: str = ""  # how a report names such a failure
    compiles_per_shape: bool = False  # every new input shape compiles a program (seconds where shapes vary)

    # --- devices and native inputs --------------------------------------------------------------------
    @classmethod
    def prepare_process(cls, environ: dict[str, str]) -> None:
        """Settings a process needs before the framework is first imported (they are read once, at import),
        set in `environ` where the user has not set them; nothing by default. The suite's commands call it;
        a library user's process is left as it is."""

    def devices(self) -> list[str]:
        return ["cpu"]

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        """Native inputs for the case, in its contract's order: its dtype, device and layout (poison in the gaps
        a layout skips); with `requires_grad`, the differentiable ones tracked by autograd."""
        raise NotImplementedError

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        """A contiguous array of zeros on the default device: dtype a name, "bool" included (for tests and
        error inputs; float64 needs the case's scope where the framework has a 64-bit switch)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def scope(self, case: Case, *, compiled: bool = False) -> Iterator[None]:
        """The framework settings a case needs, applied only while the harness builds and calls (e.g. JAX's
        x64 for float64 cells); nothing by default."""
        yield

    # --- reading results back -------------------------------------------------------------------------
    def is_array(self, value: object) -> bool:
        raise NotImplementedError

    def dtype_of(self, value: Any) -> str:
        return dtype_text(value.dtype)

    def device_of(self, value: Any) -> str:
        return "cpu"

    def to_float64(self, value: Any) -> np.ndarray:
        raise NotImplementedError

    def to_bool(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(bool)

    def snapshot(self, inputs: Inputs) -> InputSnapshot:
        """The inputs' values now (and write counters where the framework has them)."""
        return InputSnapshot(tuple(self.to_bool(x) if self.dtype_of(x) == "bool" else self.to_float64(x)
                                   for x in inputs))

    @classmethod
    def snippet_syntax(cls, case: Case) -> SnippetSyntax:
        """How a snippet writes this framework's arrays for `case` (see SnippetSyntax)."""
        raise NotImplementedError

    # --- running a user's function --------------------------------------------------------------------
    def wrap(self, fn: Callable, mode: str, contract: Contract) -> Callable:
        """`fn` as `check --framework mode` runs it (compiled, where the mode says so)."""
        return fn

    def wrap_text(self, mode: CheckMode, contract: Contract) -> str | None:
        """What `wrap` does, as Python with the function as {} (for snippets); None where it calls fn as it is."""
        return mode.wrap

    def vjp(self, fn: Callable, inputs: Inputs, cotangents: dict[str, np.ndarray], contract: Contract,
            keywords: dict[str, Any] | None = None) -> VJP:
        """The backward pass of `fn(*inputs, **keywords)` for float64 cotangents of every output (by name);
        `keywords` are the contract's Python-int arguments (reference/contract.py's `keywords`)."""
        raise NotImplementedError(f"{self.name} has no autograd")

    def synchronize(self, value: Any) -> None:
        """Wait until `value` (any pytree of arrays) is computed; used by benchmarks."""

    # --- benchmarks -----------------------------------------------------------------------------------
    floor_name: str | None = None  # the plain reduction that sets the floor: "torch-sum"

    def floor_kernel(self, device: str, elements: int) -> Callable[[], object]:
        """A call that sums `elements` float32 values on `device` and waits for the result."""
        raise NotImplementedError(f"{self.name} has no floor kernel")

    def compile_counter(self, function: Callable) -> Callable[[], int]:
        """How many graphs `function` has compiled so far; 0 for code that never compiles."""
        return lambda: 0


def cache_folder(name: str, environ: dict[str, str]) -> str:
    """A folder of the user's for what the suite's commands compile (never the working directory): the XDG
    cache, so that a second run reuses the first run's compiled code."""
    import os

    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lossnorm-difftest", name)
