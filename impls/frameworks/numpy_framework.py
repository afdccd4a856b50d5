"""NumPy: every layout, negative strides included; no autograd, nothing to compile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from impls.frameworks.base import (
    NUMPY_AS_FLOAT64,
    NUMPY_STRIDED,
    CheckMode,
    Framework,
    Inputs,
    SnippetSyntax,
    numpy_dtype_expression,
)
from impls.layouts import LAYOUTS, numpy_view, strided_view
from reference.case import Case
from reference.dtypes import numpy_dtype

# type(output).__name__ of an array or of a NumPy scalar of a contract dtype
NUMPY_TYPE_NAMES = ("ndarray", "float16", "bfloat16", "float32", "float64")


class NumpyFramework(Framework):
    name = "numpy"
    array_type = "numpy.ndarray"
    modules = ("numpy", "ml_dtypes")
    output_type = "numpy.ndarray or NumPy scalar"
    layouts = LAYOUTS
    modes = (CheckMode("numpy"),)
    floor_name = "numpy-sum"

    def materialize(self, case: Case, *, requires_grad: bool = False) -> Inputs:
        dtype = numpy_dtype(case.dtype)
        return tuple(numpy_view(strided_view(case.values[spec.name] if spec.kind == "bool"
                                             else case.values[spec.name].astype(dtype), case.layout, spec.poison))
                     for spec in case.contract.inputs)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return np.zeros(shape, dtype=bool if dtype == "bool" else numpy_dtype(dtype))

    @classmethod
    def snippet_syntax(cls, case: Case) -> SnippetSyntax:
        dtype, imports = numpy_dtype_expression(case.dtype)
        return SnippetSyntax(("import numpy as np", *imports), f"np.array({{values}}, dtype={dtype})",
                             "np.array({values}, dtype=bool)", NUMPY_STRIDED, NUMPY_AS_FLOAT64, NUMPY_TYPE_NAMES)

    def is_array(self, value: object) -> bool:
        # A NumPy scalar (np.float32, ml_dtypes.bfloat16) is what NumPy's own reductions return for a 0-d result
        # (`x.sum()`): it has the array's dtype and shape (), and a shape check still refuses it where rows are due.
        return isinstance(value, np.ndarray | np.generic)

    def to_float64(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(np.float64)

    def floor_kernel(self, device: str, elements: int) -> Callable[[], object]:
        data = np.full(elements, 1.0, dtype=np.float32)  # written, so every page is real memory
        return data.sum


ADAPTER = NumpyFramework
