"""One small adapter per framework, in the spirit of einops' backends: each module here
(`*_framework.py`) owns everything framework-specific and imports its framework only when first used,
so a missing or broken framework never breaks the others. Adding a framework is adding its module.

Each module names its adapter class `ADAPTER`; the class lists its `check --framework` modes.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from impls.frameworks.base import VJP, CheckMode, Framework, Inputs, InputSnapshot, SnippetSyntax

__all__ = ["FRAMEWORK_NAMES", "VJP", "CheckMode", "Framework", "InputSnapshot", "Inputs", "SnippetSyntax",
           "adapter_class", "check_modes", "load_framework", "prepare_process"]


@functools.cache
def _adapter_classes() -> dict[str, type[Framework]]:
    classes = {}
    for module in sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name.endswith("_framework")):
        adapter = importlib.import_module(f"{__name__}.{module}").ADAPTER  # imports no framework
        classes[adapter.name] = adapter
    return classes


def adapter_class(name: str) -> type[Framework]:
    """The adapter class of framework `name` (its facts are readable without importing the framework)."""
    return _adapter_classes()[name]


@functools.cache
def load_framework(name: str) -> Framework:
    """The adapter for `name`, importing the framework on first use. Raises whatever the import raises."""
    return adapter_class(name)()


def prepare_process(environ: dict[str, str] | None = None) -> None:
    """Every adapter's process settings (see Framework.prepare_process), before any framework is imported."""
    import os

    for cls in _adapter_classes().values():
        cls.prepare_process(os.environ if environ is None else environ)


def check_modes() -> dict[str, tuple[str, CheckMode]]:
    """Every `check --framework` choice: its adapter's name and the mode."""
    return {mode.name: (name, mode) for name, cls in _adapter_classes().items() for mode in cls.modes}


FRAMEWORK_NAMES: tuple[str, ...] = tuple(_adapter_classes())
