"""The Array API standard, through `array_api_strict` (the standard's strict reference namespace): CPU only,
float32 and float64 only, contiguous arrays only, no autograd, nothing to compile.

array_api_strict rejects anything the standard leaves out (no float16/bfloat16, no strides, no methods such
as `.reshape` or `.sum`, no implicit NumPy conversions), so a function that passes here uses only the
standard and runs on every library that follows it. Values are read back with `np.from_dlpack`: DLPack is
the standard's interchange protocol, and array_api_strict supports it on every Python, whereas its
`__array__` raises on Python >= 3.12 (it keeps only the buffer protocol there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from impls.frameworks.base import CheckMode, Framework, Inputs, SnippetSyntax, dtype_text
from reference.case import Case
from reference.dtypes import numpy_dtype

# Outputs of a buggy function may be anything (a Python float, a NumPy array): the snippet reads DLPack arrays
# through DLPack, everything else as NumPy would, so it fails with its assertion rather than a TypeError.
SNIPPET_AS_FLOAT64 = "np.asarray(np.from_dlpack(x) if hasattr(x, '__dlpack__') else x, dtype=np.float64)"


class ArrayApiFramework(Framework):
    name = "array-api"
    array_type = "array_api_strict.Array"
    modules = ("numpy", "array_api_strict", "array_api_compat")
    dtypes = ("float32", "float64")  # the standard has no float16 or bfloat16
    layouts = ("contiguous",)
    layouts_note = "strided layouts n/a: the Array API standard exposes no strides"
    modes = (CheckMode("array-api"),)

    def __init__(self) -> None:
        import array_api_strict

        self.xp = array_api_strict
        self.device = array_api_strict.Device("CPU_DEVICE")  # its only real device; the others are test doubles
        self.array_class = type(array_api_strict.asarray(0.0))  # the Array class is not exported by name

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        if case.layout != "contiguous":
            raise ValueError(f"Array API arrays have no strides: layout {case.layout!r} does not exist")
        dtype = numpy_dtype(case.dtype)
        # copy=True: the inputs own their memory, so nothing the harness does to its NumPy arrays reaches them
        return tuple(self.xp.asarray(case.values[spec.name] if spec.kind == "bool"
                                     else case.values[spec.name].astype(dtype), device=self.device, copy=True)
                     for spec in case.contract.inputs)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.xp.zeros(shape, dtype=getattr(self.xp, dtype), device=self.device)

    @classmethod
    def snippet_syntax(cls, case: Case) -> SnippetSyntax:
        # No strides here (only the contiguous layout exists); an empty array is shaped with `xp.reshape`:
        # the standard's arrays have no `.reshape` method.
        return SnippetSyntax(
            ("import array_api_strict as xp", "import numpy as np"),
            f"xp.asarray({{values}}, dtype=xp.{case.dtype})", "xp.asarray({values}, dtype=xp.bool)",
            None, SNIPPET_AS_FLOAT64, ("Array",), reshape="xp.reshape({buffer}, {shape})")

    def is_array(self, value: object) -> bool:
        return isinstance(value, self.array_class)

    def dtype_of(self, value: Any) -> str:
        return dtype_text(value.dtype).removeprefix("array_api_strict.")  # "array_api_strict.float32" -> "float32"

    def device_of(self, value: Any) -> str:
        return "cpu" if value.device == self.device else str(value.device)

    def to_float64(self, value: Any) -> np.ndarray:
        return np.from_dlpack(value).astype(np.float64)  # astype copies: the result never aliases the input

    def to_bool(self, value: Any) -> np.ndarray:
        return np.from_dlpack(value).astype(bool)


ADAPTER = ArrayApiFramework
