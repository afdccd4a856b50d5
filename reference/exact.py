"""The exact results of a case and their tolerance, each computed once and shared by everything that judges
it: the forward checks, the relations, the invariants and the report's snippet (a contract's exact forward is
an fsum per row; its tolerance sums the error model's bounds over the rows)."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from reference.case import Case

# Cases compare by identity: a case is computed once while anything still holds it.
_EXACT: weakref.WeakKeyDictionary[Case, Any] = weakref.WeakKeyDictionary()
_TOLERANCE: weakref.WeakKeyDictionary[Case, dict[Any, Any]] = weakref.WeakKeyDictionary()


def exact_results(case: Case) -> Any:
    """case.contract.exact(case), computed on first use."""
    if case not in _EXACT:
        _EXACT[case] = case.contract.exact(case)
    return _EXACT[case]


def exact_tolerance(case: Case, precision: Any) -> Any:
    """case.contract.tolerance(exact_results(case), case.dtype, precision), computed on first use for each
    precision. The arrays are read-only: one case's tolerance is shared by every check of it."""
    by_precision = _TOLERANCE.setdefault(case, {})
    if precision not in by_precision:
        tol = case.contract.tolerance(exact_results(case), case.dtype, precision)
        for value in tol.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        by_precision[precision] = tol
    return by_precision[precision]
