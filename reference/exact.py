"""The exact results of a case, computed once and shared by everything that judges it: the forward checks,
the relations, the invariants and the report's snippet (a contract's exact forward is an fsum per row)."""

from __future__ import annotations

import weakref
from typing import Any

from reference.case import Case

# Cases compare by identity: a case is computed once while anything still holds it.
_EXACT: weakref.WeakKeyDictionary[Case, Any] = weakref.WeakKeyDictionary()


def exact_results(case: Case) -> Any:
    """case.contract.exact(case), computed on first use."""
    if case not in _EXACT:
        _EXACT[case] = case.contract.exact(case)
    return _EXACT[case]
