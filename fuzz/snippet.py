"""A failing example as a ready-to-run Python snippet: the inputs as literals in the user's framework, with
their dtype, device and layout, the expected values and tolerances, and the checks that failed."""

from __future__ import annotations

import numpy as np

from fuzz.failures import for_terminal
from fuzz.tolerance import GradientTolerance, Tolerance
from impls.case import Case
from impls.dtypes import numpy_dtype
from impls.layouts import numpy_writeable, strided_view
from reference import OUTPUT_KEYS, Expected, Gradients


def _literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=np.float64).tolist())  # nan and inf come from `from math import`


def _bool_literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=bool).tolist())


def _layout_expression(framework: str, values: np.ndarray, layout: str, make: str, poison: str,
                       dtype: str) -> str:
    """An expression that builds `values` in `layout` exactly as the fuzzer did: contiguous as a nested
    literal; an empty array or any other layout as impls/layouts.py's buffer (the poison, NaN or True, in
    the gaps the layout skips) and an as_strided view over it with the layout's shape, strides and offset."""
    lit = _bool_literal if poison == "True" else _literal
    if layout == "contiguous" and values.size:
        return make.format(lit(values))
    view = strided_view(values, layout, True if poison == "True" else np.nan)
    buffer = make.format(lit(view.buffer))
    if framework == "torch":
        return f"{buffer}.as_strided({view.shape}, {view.strides}, {view.offset})"
    itemsize = 1 if poison == "True" else numpy_dtype(dtype).itemsize
    byte_strides = tuple(stride * itemsize for stride in view.strides)
    return (f"np.lib.stride_tricks.as_strided({buffer}[{view.offset}:], {view.shape}, {byte_strides}, "
            f"writeable={numpy_writeable(view)})")


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
            "",
            "def forward_and_backward():",
            f"    out = {function_name}(token_log_probs, advantages, token_mask)",
            f"    keys = [k for k in {list(OUTPUT_KEYS)!r} if out[k].requires_grad]",
            "    grads = torch.autograd.grad([out[k] for k in keys], [token_log_probs, advantages], allow_unused=True,",
            "        grad_outputs=[torch.tensor(globals()['cotangent_' + k], dtype=out[k].dtype, device=out[k].device)",
            "                      for k in keys])",
            "    inputs = (token_log_probs, advantages)",
            "    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]",
        ]
    else:
        lines += [
            "",
            "def forward_and_backward():",
            "    out, pullback = jax.vjp(lambda lp, adv: "
            f"{function_name}(lp, adv, token_mask), token_log_probs, advantages)",
            "    return pullback({k: jnp.asarray(globals()['cotangent_' + k], dtype=v.dtype) for k, v in out.items()})",
        ]
    lines += [
        "",
        *_call_lines(function_name, "grads", "forward_and_backward()"),
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


def _failure_comments(failures: list[str]) -> list[str]:
    """`# FAILED: ...` for each failure, every line of a multi-line message commented (a compiler's output
    shortened to its first and last lines: the JSON report has it whole)."""
    lines = []
    for failure in failures:
        first, *rest = for_terminal(failure).splitlines() or [""]
        lines += [f"# FAILED: {first}", *[f"#   {line}".rstrip() for line in rest]]
    return lines


def _call_lines(function_name: str, target: str, call: str) -> list[str]:
    """`target = call`, where an exception from the function, or anything but a dict, fails an assertion
    (the snippet fails with AssertionError whatever went wrong, the original error chained to it)."""
    return [
        "try:",
        f"    {target} = {call}",
        "except Exception as error:",
        f"    raise AssertionError(f'{function_name} raised {{type(error).__name__}}: {{error}}') from error",
    ]


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
        *_failure_comments(failures),
        f"# dtype {case.dtype}, device {case.device}, layout {case.layout}, shape {case.shape}",
        "from math import inf, nan",
        *dict.fromkeys(["import numpy as np", *imports, *import_lines]),  # in order, without repeats
    ]
    if wrap is not None:  # the compiled mode's wrapping, e.g. "jax.jit({})"
        lines.append(f"{function_name} = {wrap.format(function_name)}")
    inputs = [(name, make_float, "nan") for name in ("token_log_probs", "advantages")]
    lines += [
        "",
        *[f"{name} = {_layout_expression(framework, getattr(case, name), case.layout, make, poison, case.dtype)}"
          for name, make, poison in [*inputs, ("token_mask", make_bool, "True")]],
        "",
        f"def as_float64(x):\n    return {_to_numpy(framework)}",
        "",
    ]
    if cotangents is not None and gradients is not None and gradient_tol is not None:
        lines += _gradient_lines(framework, function_name, cotangents, gradients, gradient_tol)
        return "\n".join(lines) + "\n"
    lines += [
        "inputs_before = [as_float64(x) for x in (token_log_probs, advantages, token_mask)]",
        # torch counts in-place writes: one that changes nothing (an empty tensor, an equal value) shows there
        *(["versions_before = [x._version for x in (token_log_probs, advantages, token_mask)]"]
          if framework == "torch" else []),
        *_call_lines(function_name, "out", f"{function_name}(token_log_probs, advantages, token_mask)"),
        f"assert isinstance(out, dict) and all(key in out for key in {list(OUTPUT_KEYS)!r}), \\",
        "    f'returned {type(out).__name__} {out!r:.200}, expected a dict of the three outputs'",
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
        *(["for name, before, x in zip(['token_log_probs', 'advantages', 'token_mask'], versions_before,",
           "                           (token_log_probs, advantages, token_mask)):",
           "    if x._version != before:",
           "        problems.append(f'{name} was written in place (its version counter moved)')"]
          if framework == "torch" else []),
        "assert not problems, '\\n'.join(problems)",
    ]
    return "\n".join(lines) + "\n"
