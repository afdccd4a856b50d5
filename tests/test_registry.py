"""A missing or broken framework makes its implementations unavailable, with the reason, and nothing else."""

import importlib.util

import pytest

import impls
from impls import frameworks, registry


def test_a_broken_framework_breaks_only_its_own_implementations(monkeypatch):
    class BrokenJax(frameworks.Framework):
        def __init__(self):
            raise ImportError("jaxlib is broken here")

    real = frameworks.adapter_class
    monkeypatch.setattr(frameworks, "adapter_class", lambda name: BrokenJax if name == "jax" else real(name))
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.setattr(registry, "_failures", {})
    frameworks.load_framework.cache_clear()
    try:
        triton_here = importlib.util.find_spec("triton") is not None  # torch-triton: wherever triton imports
        assert impls.available_implementations() == ["torch-eager", "torch-compile",
                                                     *(["torch-triton"] if triton_here else []), "numpy",
                                                     "array-api"]
        assert impls.unavailable_implementations().get("jax-jit") == "ImportError: jaxlib is broken here"
        with pytest.raises(RuntimeError, match=r"jax-jit.*unavailable here: ImportError: jaxlib is broken"):
            impls.get_implementation("jax-jit")
    finally:
        frameworks.load_framework.cache_clear()


def test_unknown_names_are_named():
    with pytest.raises(LookupError,
                       match="unknown implementation 'torch' of the magnitude contract; its built-ins are torch-eager"):
        impls.get_implementation("torch")


def test_listing_imports_no_framework_until_asked():
    import subprocess
    import sys

    code = ("import sys, impls, fuzz.judge.draws, fuzz.judge.forward, fuzz.run.cell, fuzz.cli, reference; "
            "print(sorted(m for m in ('torch', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
