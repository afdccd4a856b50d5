"""A failing example as a ready-to-run Python snippet: the inputs as literals in the user's framework, with
their dtype, device and layout, the expected values and tolerances, and the checks that failed."""

from __future__ import annotations

import numpy as np

from fuzz.failures import for_terminal
from impls.case import Case
from impls.dtypes import numpy_dtype
from impls.frameworks import SnippetSyntax, adapter_class
from impls.layouts import numpy_writeable, strided_view
from reference import OUTPUT_KEYS, Expected, Gradients
from reference.tolerance import GradientTolerance, Tolerance


def _literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=np.float64).tolist())  # nan and inf come from `from math import`


def _bool_literal(values: np.ndarray) -> str:
    return repr(np.asarray(values, dtype=bool).tolist())


def _layout_expression(syntax: SnippetSyntax, values: np.ndarray, layout: str, dtype: str) -> str:
    """An expression that builds `values` in `layout` exactly as the fuzzer did: contiguous as a nested
    literal; an empty array or any other layout as impls/layouts.py's buffer (the poison, NaN or True, in
    the gaps the layout skips) and a strided view over it with the layout's shape, strides and offset."""
    is_mask = values.dtype == np.bool_
    make = syntax.bool_array if is_mask else syntax.float_array
    literal = _bool_literal if is_mask else _literal
    if layout == "contiguous" and values.size:
        return make.format(values=literal(values))
    view = strided_view(values, layout, True if is_mask else np.nan)
    buffer = make.format(values=literal(view.buffer))
    if syntax.strided is None:  # no strides in this framework: only contiguous layouts exist, empty ones too
        return syntax.reshape.format(buffer=buffer, shape=view.shape)
    itemsize = 1 if is_mask else numpy_dtype(dtype).itemsize
    return syntax.strided.format(buffer=buffer, shape=view.shape, strides=view.strides, offset=view.offset,
                                 byte_strides=tuple(stride * itemsize for stride in view.strides),
                                 writeable=numpy_writeable(view))


def _gradient_lines(syntax: SnippetSyntax, function_name: str, cotangents: dict[str, np.ndarray],
                    gradients: Gradients, tol: GradientTolerance) -> list[str]:
    """Lines that compute the VJP for `cotangents` and assert it matches the exact one."""
    lines = [f"cotangent_{key} = np.array({_literal(value)})" for key, value in cotangents.items()]
    lines += [line.format(function=function_name) for line in syntax.vjp]
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
    syntax = adapter_class(framework).snippet_syntax(case)
    lines = [
        "# Counterexample found by `python -m fuzz` (run from the suite's checkout if the import needs it).",
        *_failure_comments(failures),
        f"# dtype {case.dtype}, device {case.device}, layout {case.layout}, shape {case.shape}",
        "from math import inf, nan",
        *dict.fromkeys(["import numpy as np", *syntax.imports, *import_lines]),  # in order, without repeats
    ]
    if wrap is not None:  # the compiled mode's wrapping, e.g. "jax.jit({})"
        lines.append(f"{function_name} = {wrap.format(function_name)}")
    lines += [
        "",
        *[f"{name} = {_layout_expression(syntax, getattr(case, name), case.layout, case.dtype)}"
          for name in ("token_log_probs", "advantages", "token_mask")],
        "",
        f"def as_float64(x):\n    return {syntax.as_float64}",
        "",
    ]
    if cotangents is not None and gradients is not None and gradient_tol is not None:
        lines += _gradient_lines(syntax, function_name, cotangents, gradients, gradient_tol)
        return "\n".join(lines) + "\n"
    lines += [
        "inputs_before = [as_float64(x) for x in (token_log_probs, advantages, token_mask)]",
        # torch counts in-place writes: one that changes nothing (an empty tensor, an equal value) shows there
        *(["versions_before = [x._version for x in (token_log_probs, advantages, token_mask)]"]
          if syntax.counts_writes else []),
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
        f"    if type(got).__name__ not in {syntax.type_names!r} or dtype != {case.dtype!r}:",
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
          if syntax.counts_writes else []),
        "assert not problems, '\\n'.join(problems)",
    ]
    return "\n".join(lines) + "\n"
