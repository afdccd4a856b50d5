"""A failing example as a ready-to-run Python snippet: the inputs as literals in the user's framework, with
their dtype, device and layout, the exact values and tolerances, and the checks that failed. Run on its own,
it fails with AssertionError while the bug is there.

`snippet_for` is the one place a snippet is made from a case: for a shrunk counterexample and for a call
that never came back alike."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

from fuzz.report.callee import snippet_under_free_name
from fuzz.report.literals import bool_literal, literal
from fuzz.report.texts import WIDTH, for_terminal
from impls.frameworks import SnippetSyntax, adapter_class
from impls.layouts import numpy_writeable, strided_view
from reference.case import Case
from reference.dtypes import numpy_dtype
from reference.exact import exact_results, exact_tolerance
from reference.tolerance import PRECISIONS


@dataclass(frozen=True)
class SnippetSource:
    """What a snippet needs to know of a subject, small enough to send from a worker to its parent."""

    name: str
    framework: str
    import_lines: tuple[str, ...]
    function_name: str
    wrap: str | None
    layouts: tuple[str, ...]
    precision: str = "contract"


def _layout_expression(syntax: SnippetSyntax, values: np.ndarray, layout: str, dtype: str) -> str:
    """An expression that builds `values` in `layout` exactly as the fuzzer did: contiguous as a nested
    literal; an empty array or any other layout as impls/layouts.py's buffer (the poison, NaN or True, in
    the gaps the layout skips) and a strided view over it with the layout's shape, strides and offset."""
    is_mask = values.dtype == np.bool_
    make = syntax.bool_array if is_mask else syntax.float_array
    to_text = bool_literal if is_mask else literal
    if layout == "contiguous" and values.size:
        return make.format(values=to_text(values))
    view = strided_view(values, layout, True if is_mask else np.nan)
    buffer = make.format(values=to_text(view.buffer))
    if syntax.strided is None:  # no strides in this framework: only contiguous layouts exist, empty ones too
        return syntax.reshape.format(buffer=buffer, shape=view.shape)
    itemsize = 1 if is_mask else numpy_dtype(dtype).itemsize
    return syntax.strided.format(buffer=buffer, shape=view.shape, strides=view.strides, offset=view.offset,
                                 byte_strides=tuple(stride * itemsize for stride in view.strides),
                                 writeable=numpy_writeable(view))


def comment_lines(text: str) -> list[str]:
    """`text` as comment lines within the terminal's 100 columns."""
    return textwrap.wrap(text, WIDTH, initial_indent="# ", subsequent_indent="# ", break_long_words=False,
                         break_on_hyphens=False)


def plural(count: int, noun: str) -> str:
    """"1 rank", "2 ranks", "1 micro-batch", "4 micro-batches"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}{'es' if noun.endswith(('ch', 'sh', 's')) else 's'}"


def failure_comments(failures: list[str]) -> list[str]:
    """`# FAILED: ...` for each failure, every line of a multi-line message commented and wrapped to the
    terminal's 100 columns (a compiler's output shortened to its first and last lines: the JSON has it whole)."""
    lines = []
    for failure in failures:
        for number, line in enumerate(for_terminal(failure).splitlines() or [""]):
            lines += textwrap.wrap(line, WIDTH, initial_indent="# FAILED: " if number == 0 else "#   ",
                                   subsequent_indent="#     ", break_long_words=True) or ["#"]
    return lines


def _call_lines(function_name: str, target: str, call: str) -> list[str]:
    """`target = call`, where an exception from the function fails an assertion (the snippet fails with
    AssertionError whatever went wrong, the original error chained to it)."""
    called = [f"    {target} = {call}"]
    if len(called[0]) > WIDTH and "(" in call:  # a long function name: its arguments on a line of their own
        head, arguments = call.split("(", 1)
        called = [f"    {target} = {head}(", f"        {arguments}"]
    return [
        "try:",
        *called,
        "except Exception as error:",
        # two literals, so that a long function name keeps the line within the terminal's 100 columns
        f"    raised = (f'{function_name} raised '",
        "              f'{type(error).__name__}: {error}')",
        "    raise AssertionError(raised) from error",
    ]


def wrapping_lines(name: str, wrap: str) -> list[str]:
    """`name = wrap(name)` (wrap a template, "torch.compile({}, fullgraph=True)"); for a name too long for that to
    fit the terminal's columns, the call's arguments on lines of their own."""
    line = f"{name} = {wrap.format(name)}"
    if len(line) <= WIDTH:
        return [line]
    call, rest = wrap.split("{}", 1)
    options = [f"    {rest.removeprefix(', ')}"] if rest.startswith(", ") else []
    return [f"{name} = {call}", f"    {name}{',' if options else rest}", *options]


# How a snippet prints the arrays it compares: whole up to 64 elements, else summarized (the first and last three along
# each axis), each value in as many digits as tell it apart (17 at most). A wide batch's gradient printed whole, as
# got, expected and tolerance, would fill a terminal many times over; the snippet's header names the element the
# suite found out of tolerance, and its literals hold every value.
PRINT_OPTIONS = "np.set_printoptions(threshold=64, precision=17)  # a large array prints summarized"


def _gradient_lines(syntax: SnippetSyntax, source: SnippetSource, case: Case, cotangents: dict[str, np.ndarray],
                    exact: object) -> list[str]:
    """Lines that compute the VJP for `cotangents` and assert it matches the exact one."""
    contract = case.contract
    names = [spec.name for spec in contract.differentiable_inputs]
    tolerances = contract.gradient_tolerance(exact, cotangents, case.dtype, PRECISIONS[source.precision])
    wanted = exact.inputs()  # type: ignore[attr-defined]
    lines = [f"cotangent_{key} = np.array({literal(value)})" for key, value in cotangents.items()]
    lines += [line.format(function=source.function_name) for line in syntax.vjp]
    lines += [
        "",
        *_call_lines(source.function_name, "grads", "forward_and_backward()"),
        "# exact float64 gradients, and the tolerance the suite's error model allows for each element",
        "expected_grads = [" + ",\n                  ".join(
            f"np.array({literal(wanted[name])})" for name in names) + "]",
        "tolerances = [" + ",\n              ".join(
            f"np.array({literal(tolerances[name][0])})" for name in names) + "]",
        "problems = []",
        f"names = {[f'd {name}' for name in names]!r}",
        "for name, got, want, tol in zip(names, grads, expected_grads, tolerances):",
        "    if got is None:",
        "        problems.append(f'{name}: no gradient (the outputs do not reach this input)')",
        "        continue",
        "    got = as_float64(got)",
        "    print(f'{name}: got {got}, expected {want}')",
        "    if got.shape != want.shape or not np.isfinite(got).all() or (np.abs(got - want) > tol).any():",
        "        problems.append(f'{name}: got {got}, expected {want} +- {tol}')",
        "assert not problems, '\\n'.join(problems)",
    ]
    return lines


def _forward_lines(syntax: SnippetSyntax, source: SnippetSource, case: Case) -> list[str]:
    """Lines that call the function once and assert its outputs, and its inputs unchanged."""
    contract = case.contract
    names = list(contract.input_names)
    arguments = ", ".join(names)
    expected = exact_results(case)
    tol = exact_tolerance(case, PRECISIONS[source.precision])
    lines = [
        f"inputs_before = [as_float64(x) for x in ({arguments},)]",
        # torch counts in-place writes: one that changes nothing (an empty tensor, an equal value) shows there
        *([f"versions_before = [x._version for x in ({arguments},)]"] if syntax.counts_writes else []),
        *_call_lines(source.function_name, "out", f"{source.function_name}({arguments})"),
    ]
    if contract.returns_mapping:
        lines += [f"keys = {list(contract.output_names)!r}",
                  f"expected_structure = {contract.expected_result!r}",
                  "assert hasattr(out, 'keys') and all(key in out for key in keys), \\",
                  "    f'returned {type(out).__name__} {out!r:.200}, expected {expected_structure}'"]
    else:
        lines.append(f"out = {{{contract.outputs[0].name!r}: out}}")
    lines.append("# exact float64 results, and the tolerance the suite's error model allows for each element")
    for key, value in expected.outputs().items():
        lines.append(f"expected_{key} = np.array({literal(value)})")
        lines.append(f"tolerance_{key} = np.array({literal(tol[key])})")
    allowed = list(contract.output_dtypes(case.dtype))
    lines += [
        "problems = []",
        f"array_types = {syntax.type_names!r}",
        f"for key in {list(contract.output_names)!r}:",
        "    got, want, tol = out[key], globals()['expected_' + key], globals()['tolerance_' + key]",
        "    if type(got).__name__ not in array_types:",
        "        problems.append(f'{key} has type {type(got).__name__}, expected {\" or \".join(array_types)}')",
        "        continue",
        "    dtype = str(got.dtype).split('.')[-1]",
        f"    if dtype not in {allowed!r}:",
        f"        problems.append(f'{{key}} has dtype {{dtype}}, expected {' or '.join(allowed)}')",
        "    got = as_float64(got)",
        "    print(f'{key}: got {got}, expected {want}')",
        "    if got.shape != want.shape:",
        "        problems.append(f'{key} has shape {got.shape}, expected {want.shape}')",
        "    elif not np.isfinite(got).all() or (np.abs(got - want) > tol).any():",
        "        problems.append(f'{key}: got {got}, expected {want} +- {tol}')",
        f"for name, before, x in zip({names!r}, inputs_before,",
        f"                           ({arguments},)):",
        "    if not np.array_equal(before, as_float64(x), equal_nan=True):",
        "        problems.append(f'{name} was modified in place')",
        *([f"for name, before, x in zip({names!r}, versions_before,",
           f"                           ({arguments},)):",
           "    if x._version != before:",
           "        problems.append(f'{name} was written in place (its version counter moved)')"]
          if syntax.counts_writes else []),
        "assert not problems, '\\n'.join(problems)",
    ]
    return lines


def snippet_for(source: SnippetSource, case: Case, failures: list[str],
                cotangents: dict[str, np.ndarray] | None = None) -> str:
    """Python source that rebuilds `case`, calls the function and asserts what failed; with `cotangents`, it
    checks the VJP for them instead. The function is called by its name, unless the snippet's own code binds it
    (fuzz/report/callee.py)."""
    return snippet_under_free_name(lambda chosen: _snippet(chosen, case, failures, cotangents), source)


def _snippet(source: SnippetSource, case: Case, failures: list[str], cotangents: dict[str, np.ndarray] | None) -> str:
    syntax = adapter_class(source.framework).snippet_syntax(case)
    contract = case.contract
    lines = [
        "# Counterexample found by `python -m fuzz`. Where it imports the suite's modules (a built-in does,",
        "# as does a file of yours that imports fuzz), run it with the suite installed or on PYTHONPATH.",
        *failure_comments(failures),
        *([f"# contract: {contract.label}"] if contract.bound else []),
        f"# dtype {case.dtype}, device {case.device}, layout {case.layout}, shape {case.shape}",
        "from math import inf, nan",
        # the snippet's imports, each once and not again where the function's lines have it; those lines as they are
        # (a function defined by its source may repeat a line)
        *(line for line in dict.fromkeys(["import numpy as np", *syntax.imports]) if line not in source.import_lines),
        *source.import_lines,
    ]
    if source.wrap is not None:  # the compiled mode's wrapping, e.g. "jax.jit({})"
        lines += wrapping_lines(source.function_name, source.wrap)
    lines += [
        *syntax.helpers,
        "",
        *[f"{spec.name} = {_layout_expression(syntax, case.values[spec.name], case.layout, case.dtype)}"
          for spec in contract.inputs],
        "",
        PRINT_OPTIONS,
        f"def as_float64(x):\n    return {syntax.as_float64}",
        "",
    ]
    if cotangents is not None:
        exact = contract.vjp(case, cotangents, exact_results(case))
        lines += _gradient_lines(syntax, source, case, cotangents, exact)
    else:
        lines += _forward_lines(syntax, source, case)
    return "\n".join(lines) + "\n"
