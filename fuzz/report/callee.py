"""A snippet calls the user's function by its own name, unless the snippet's own code uses that name too (a DDP
rank form named `step`, a JAX one named `forward`, a function named `out` or `print`): the snippet would then call
its own object instead, or the user's where it means a builtin, and fail on something else than the bug. There it
imports the function under a name of its own."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

PLACEHOLDER = "lossnorm_function_under_test"  # no snippet binds it: what the function is called while looking


def used_names(code: str) -> Counter[str]:
    """How many times each name is used in `code`, at any scope: read (a builtin such as `print` too), assigned,
    defined, an argument, imported, caught."""
    names: Counter[str] = Counter()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            names[node.id] += 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] += 1
        elif isinstance(node, ast.arg):
            names[node.arg] += 1
        elif isinstance(node, ast.alias):
            names[node.asname or node.name.split(".")[0]] += 1
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names[node.name] += 1
    return names


def imported_as(import_lines: tuple[str, ...], name: str, alias: str,
                rebind: tuple[str, ...] = ()) -> tuple[str, ...]:
    """`import_lines` (whose last line binds `name`) binding `alias` instead: the import or the assignment from the
    loaded module renamed, so `name` is never bound (it may be one of the snippet's modules, `np`); a function
    defined by its source is assigned to `alias` after it, and its own name let go: deleted, so a builtin of that
    name (print) is the builtin again, or bound again by `rebind`, the snippet's own imports of it (`import numpy
    as np`), which its definition replaced."""
    *before, last = import_lines or ("",)
    renamed = re.sub(rf"^(from \S+ import ){re.escape(name)}$", rf"\g<1>{name} as {alias}", last)
    renamed = re.sub(rf"^{re.escape(name)} = (_module\.{re.escape(name)})$", rf"{alias} = \g<1>", renamed)
    if renamed != last:
        return (*before, renamed)
    return (*import_lines, f"{alias} = {name}", *(rebind or (f"del {name}",)))


def imports_binding(code: str, name: str) -> tuple[str, ...]:
    """The top-level import statements of `code` that bind `name`, as written."""
    return tuple(ast.get_source_segment(code, node) or "" for node in ast.parse(code).body
                 if isinstance(node, (ast.Import, ast.ImportFrom))
                 and any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names))


def _under(source: Any, name: str, rebind: tuple[str, ...] = ()) -> Any:
    """`source` (a dataclass with `function_name` and `import_lines`: a Subject, a SnippetSource) calling the
    function `name`."""
    return dataclasses.replace(source, function_name=name,
                               import_lines=imported_as(source.import_lines, source.function_name, name, rebind))


def snippet_under_free_name(build: Callable[[Any], str], source: Any) -> str:
    """`build(source)`, the snippet: as it is where nothing in it but the function's own lines uses the function's
    name; else built again with the function imported as `<name>_under_test`. The snippet's own names are those
    it uses while the function is called PLACEHOLDER, less those its import lines use."""
    name: str = source.function_name
    looking = _under(source, PLACEHOLDER)
    try:
        built = build(looking)
        own = used_names(built) - used_names("\n".join(looking.import_lines))
    except SyntaxError:  # a function whose source does not parse on its own: nothing to compare
        return build(source)
    if own[name] == 0:
        return build(source)
    alias = f"{name}_under_test"
    while own[alias]:
        alias += "_"
    return build(_under(source, alias, imports_binding(built, name)))

