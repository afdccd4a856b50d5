"""Implementations of the function, and the registry that loads their frameworks lazily."""

from impls.registry import (
    BUILTIN_NAMES,
    SHARDED_NAMES,
    Implementation,
    available_implementations,
    get_implementation,
    unavailable_implementations,
)
from reference.case import Case

__all__ = [
    "BUILTIN_NAMES",
    "SHARDED_NAMES",
    "Case",
    "Implementation",
    "available_implementations",
    "get_implementation",
    "unavailable_implementations",
]
