"""A failing example as a ready-to-run Python snippet: the inputs as literals in the user's framework, with
their dtype, device and layout, the expected values and tolerances, and the checks that failed."""

from __future__ import annotations

import numpy as np

from fuzz.tolerance import GradientTolerance, Tolerance
from impls.case import Case
from impls.layouts import STORAGE_OFFSET
from reference import OUTPUT_KEYS, Expected, Gradients


def _literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=np.float64).tolist())  # nan and inf come from `from math import`


def _bool_literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=bool).tolist())


def _layout_expression(framework: str, values: np.ndarray, layout: str, make: str, poison: str) -> str:
    """An expression that builds `values` in `layout` with `make(list)` (the framework's constructor)."""
    lit = _bool_literal if poison == "True" else _literal
    if values.size == 0:
        return make.format("[]") + f".reshape{values.shape}"
    if layout == "contiguous":
        return make.format(lit(values))
    if layout == "transposed":
        return make.format(lit(values.T)) + (".T" if values.ndim == 2 else "")
    if layout == "step-sliced":
        if values.ndim == 1:
            padded = np.stack([values, values], axis=1).reshape(-1)
            return make.format(lit(padded)) + "[::2]"
        padded = np.repeat(np.repeat(values, 2, axis=0), 2, axis=1)
        return make.format(lit(padded)) + "[::2, ::2]"
    if layout == "expanded":
        expand = "expand" if framework == "torch" else "broadcast_to"
        row = values[:1]
        if framework == "torch":
            return make.format(lit(row)) + f".{expand}{values.shape}"
        return f"np.broadcast_to({make.format(lit(row))}, {values.shape})"
    if layout == "offset":
        flat = np.concatenate([np.zeros(STORAGE_OFFSET, values.dtype), values.reshape(-1)])
        reshape = "view" if framework == "torch" else "reshape"
        return make.format(lit(flat)) + f"[{STORAGE_OFFSET}:].{reshape}{values.shape}"
    if layout == "negative-strides":
        flipped = values[::-1, ::-1] if values.ndim == 2 else values[::-1]
        return make.format(lit(flipped)) + ("[::-1, ::-1]" if values.ndim == 2 else "[::-1]")
    raise ValueError(layout)


def _constructors(framework: str, case: Case) -> tuple[list[str], str, str]:
    """Import lines, and constructor templates for float and bool arrays."""
    if framework == "torch":
        device = f", device={case.device!r}" if case.device != "cpu" else ""
        return (["import torch"], f"torch.tensor({{}}, dtype=torch.{case.dtype}{device})",
                f"torch.tensor({{}}, dtype=torch.bool{device})")
    if framework == "jax":
        imports = ["import jax", 'jax.config.update("jax_enable_x64", True)', "import jax.numpy as jnp",
                   "import numpy as np"]
        if case.dtype == "bfloat16":
            imports.append("import ml_dtypes")
        np_dtype = "ml_dtypes.bfloat16" if case.dtype == "bfloat16" else f"np.{case.dtype}"
        platform = "cpu" if case.device == "cpu" else "gpu"
        put = f"jax.device_put(np.array({{}}, dtype={{}}), jax.devices({platform!r})[0])"
        return imports, put.replace("dtype={}", f"dtype={np_dtype}", 1), put.replace("dtype={}", "dtype=bool", 1)
    imports = ["import numpy as np"]
    if case.dtype == "bfloat16":
        imports.append("import ml_dtypes")
    np_dtype = "ml_dtypes.bfloat16" if case.dtype == "bfloat16" else f"np.{case.dtype}"
    return imports, f"np.array({{}}, dtype={np_dtype})", "np.array({}, dtype=bool)"


def _to_numpy(framework: str) -> str:
    if framework == "torch":
        return ("np.asarray(x.detach().to('cpu', torch.float64)) if isinstance(x, torch.Tensor)"
                " else np.asarray(x, dtype=np.float64)")
    return "np.asarray(x, dtype=np.float64)"


def _gradient_lines(framework: str, function_name: str, cotangents: dict[str, np.ndarray], gradients: Gradients,
                    tol: GradientTolerance) -> list[str]:
    """Lines that compute the VJP for `cotangents` and assert it matches the exact one."""
    lines = [f"cotangent_{key} = np.array({_literal(value)})" for key, value in cotangents.items()]
    if framework == "torch":
        lines += [
            "token_log_probs.requires_grad_(True)",
            "advantages.requires_grad_(True)",
            f"out = {function_name}(token_log_probs, advantages, token_mask)",
            f"keys = [k for k in {list(OUTPUT_KEYS)!r} if out[k].requires_grad]",
            "grads = torch.autograd.grad([out[k] for k in keys], [token_log_probs, advantages], allow_unused=True,",
            "    grad_outputs=[torch.tensor(globals()['cotangent_' + k], dtype=out[k].dtype, device=out[k].device)",
            "                  for k in keys])",
            "grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, (token_log_probs, advantages))]",
        ]
    else:
        lines += [
            "out, pullback = jax.vjp(lambda lp, adv: "
            f"{function_name}(lp, adv, token_mask), token_log_probs, advantages)",
            "grads = pullback({k: jnp.asarray(globals()['cotangent_' + k], dtype=v.dtype) for k, v in out.items()})",
        ]
    lines += [
        "# exact float64 gradients, and the tolerance the suite's error model allows for each element",
        f"expected_grads = [np.array({_literal(gradients.token_log_probs)}),",
        f"                  np.array({_literal(gradients.advantages)})]",
        f"tolerances = [np.array({_literal(tol.token_log_probs)}), np.array({_literal(tol.advantages)})]",
        "problems = []",
        "for name, got, want, tol in zip(['d token_log_probs', 'd advantages'], grads, expected_grads, tolerances):",
        "    got = as_float64(got)",
        "    print(f'{name}: got {got.tolist()}, expected {want.tolist()}')",
        "    if got.shape != want.shape or not np.isfinite(got).all() or (np.abs(got - want) > tol).any():",
        "        problems.append(f'{name}: got {got.tolist()}, expected {want.tolist()} +- {tol.tolist()}')",
        "assert not problems, '\\n'.join(problems)",
    ]
    return lines


def render_snippet(
    *,
    case: Case,
    framework: str,
    import_lines: tuple[str, ...],
    function_name: str,
    wrap: str | None,
    expected: Expected,
    tol: Tolerance,
    failures: list[str],
    cotangents: dict[str, np.ndarray] | None = None,
    gradients: Gradients | None = None,
    gradient_tol: GradientTolerance | None = None,
) -> str:
    """Python source that rebuilds `case`, calls the function and asserts what failed (for a gradient
    failure, `cotangents`, `gradients` and `gradient_tol` make it check the VJP instead)."""
    imports, make_float, make_bool = _constructors(framework, case)
    lines = [
        "# Counterexample found by `python -m fuzz` (run from the suite's checkout if the import needs it).",
        *[f"# FAILED: {failure}" for failure in failures],
        f"# dtype {case.dtype}, device {case.device}, layout {case.layout}, shape {case.shape}",
        "from math import inf, nan",
        *dict.fromkeys(["import numpy as np", *imports, *import_lines]),  # in order, without repeats
    ]
    if wrap is not None:  # the compiled mode's wrapping, e.g. "jax.jit({})"
        lines.append(f"{function_name} = {wrap.format(function_name)}")
    lines += [
        "",
        f"token_log_probs = {_layout_expression(framework, case.token_log_probs, case.layout, make_float, 'nan')}",
        f"advantages = {_layout_expression(framework, case.advantages, case.layout, make_float, 'nan')}",
        f"token_mask = {_layout_expression(framework, case.token_mask, case.layout, make_bool, 'True')}",
        "",
        f"def as_float64(x):\n    return {_to_numpy(framework)}",
        "",
    ]
    if cotangents is not None and gradients is not None and gradient_tol is not None:
        lines += _gradient_lines(framework, function_name, cotangents, gradients, gradient_tol)
        return "\n".join(lines) + "\n"
    lines += [
        "inputs_before = [as_float64(x) for x in (token_log_probs, advantages, token_mask)]",
        f"out = {function_name}(token_log_probs, advantages, token_mask)",
        "# exact float64 results, and the tolerance the suite's error model allows for each element",
    ]
    for key in OUTPUT_KEYS:
        lines.append(f"expected_{key} = np.array({_literal(getattr(expected, key))})")
        lines.append(f"tolerance_{key} = np.array({_literal(tol.as_dict()[key])})")
    lines += [
        "problems = []",
        f"for key in {list(OUTPUT_KEYS)!r}:",
        "    got, want, tol = out[key], globals()['expected_' + key], globals()['tolerance_' + key]",
        "    dtype = str(getattr(got, 'dtype', None)).split('.')[-1]",
        f"    if type(got).__name__ not in ('Tensor', 'ndarray', 'ArrayImpl') or dtype != {case.dtype!r}:",
        f"        problems.append(f'{{key}}: {{type(got).__name__}} of dtype {{dtype}}, want {case.dtype}')",
        "    got = as_float64(got)",
        "    print(f'{key}: got {got.tolist()}, expected {want.tolist()}')",
        "    if got.shape != want.shape or not np.isfinite(got).all() or (np.abs(got - want) > tol).any():",
        "        problems.append(f'{key}: got {got.tolist()}, expected {want.tolist()} +- {tol.tolist()}')",
        "for name, before, x in zip(['token_log_probs', 'advantages', 'token_mask'], inputs_before,",
        "                           (token_log_probs, advantages, token_mask)):",
        "    if not np.array_equal(before, as_float64(x), equal_nan=True):",
        "        problems.append(f'{name} was modified in place')",
        "assert not problems, '\\n'.join(problems)",
    ]
    return "\n".join(lines) + "\n"
