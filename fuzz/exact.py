"""The exact results of a case, computed once and shared by everything that judges it: the forward checks,
the metamorphic relations, the ratio bounds and the report's snippet (reference() is an fsum per row)."""

from __future__ import annotations

import weakref

from impls.case import Case
from reference import Expected, reference

# Cases compare by identity (eq=False): a case is computed once while anything still holds it.
_EXACT: weakref.WeakKeyDictionary[Case, Expected] = weakref.WeakKeyDictionary()


def exact(case: Case) -> Expected:
    """reference() of the case's inputs, computed on first use."""
    if case not in _EXACT:
        _EXACT[case] = reference(case.token_log_probs, case.advantages, case.token_mask)
    return _EXACT[case]
