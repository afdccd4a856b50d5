"""Outputs stay on the inputs' device: JAX cells also run with inputs committed to a second host CPU device
("cpu:1"), so machines without a GPU test it too."""

from __future__ import annotations

import textwrap

import pytest

from fuzz.cli import check_parser, run_check

pytest.importorskip("jax")

MOVES_THE_RATIO = """
    import jax
    import jax.numpy as jnp

    def normalize(lp, adv, mask):
        acc = jnp.promote_types(lp.dtype, jnp.float32)
        s = adv.astype(acc) * jnp.sum(jnp.where(mask, lp, 0), -1, dtype=acc)
        a = s / jnp.maximum(mask.sum(-1), 1).astype(acc)
        d = jnp.sum(jnp.abs(a))
        r = jnp.where(d > 0, jnp.sum(jnp.abs(s)) / jnp.where(d > 0, d, 1.0), 0.0)
        r = jax.device_put(r, jax.devices()[0])  # BUG: "for logging", onto the default device
        return {"sequence_summed": s.astype(lp.dtype), "token_averaged": a.astype(lp.dtype),
                "magnitude_ratio": r.astype(lp.dtype)}
"""


def test_the_second_host_device_exists_here():
    import impls

    assert "cpu:1" in impls.get_implementation("jax-jit").devices


def test_an_output_moved_to_the_default_device_is_caught_on_the_second_one(tmp_path):
    """Under jax.jit outputs follow the committed inputs whatever the code says (a device_put inside jit
    places nothing), so `check --framework jax` of this passes on both devices; run eagerly, the same code
    moves the ratio, and the cpu:1 case shows it."""
    import numpy as np

    from fuzz.api import check_case
    from reference.case import Case

    path = tmp_path / "moves.py"
    path.write_text(textwrap.dedent(MOVES_THE_RATIO))
    args = check_parser().parse_args([f"{path}:normalize", "--framework", "jax", "--dtypes", "float32",
                                      "--max-examples", "10", "--jobs", "1", "--no-gradients"])
    cells = {cell.device: cell for cell in run_check(args)}
    assert set(cells) >= {"cpu", "cpu:1"} and all(cell.ok for cell in cells.values())
    namespace: dict = {}
    exec(textwrap.dedent(MOVES_THE_RATIO), namespace)
    case = Case(np.array([[-1.0, -2.0]]), np.array([2.0]), np.ones((1, 2), bool), device="cpu:1")
    assert check_case(namespace["normalize"], case.with_(device="cpu"), "jax") == []
    assert check_case(namespace["normalize"], case, "jax") == ["magnitude_ratio is on cpu, expected cpu:1"]


def test_a_snippet_of_a_second_device_case_asks_for_that_device_first():
    import ast

    import numpy as np

    from impls.frameworks import adapter_class
    from reference.case import Case

    case = Case(np.array([[-1.0]]), np.array([1.0]), np.ones((1, 1), bool), device="cpu:1")
    syntax = adapter_class("jax").snippet_syntax(case)
    source = "\n".join((*syntax.imports, *syntax.helpers)) + "\nx = " + syntax.float_array.format(values="[[-1.0]]")
    ast.parse(source)
    assert syntax.imports.index("import jax") > 1 and "--xla_force_host_platform_device_count=2" in source
    assert "jax.devices('cpu')[1]" in source
