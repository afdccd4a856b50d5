"""The Python that rebuilds a function passed by value (a partial, a lambda, a decorated, nested or module
function) in a snippet run on its own, from any directory; and how reports name such a function."""

from __future__ import annotations

import ast
import functools
import inspect
import math
import os
import re
import sys
import textwrap
import types
from collections.abc import Callable
from typing import Any

from fuzz.report.texts import WIDTH, string_literal


def snippet_binding(function: Callable[..., Any]) -> tuple[tuple[str, ...], str]:
    """Python that defines `function` in a snippet run on its own, and the name it binds there."""
    if isinstance(function, functools.partial):
        return _partial_binding(function)
    return _function_lines(function)


DISPLAY_WIDTH = 80  # a partial's name in reports: its arguments' reprs cut to fit a line
# What the suite names a module it loads from a file (a target `FILE:function`; a snippet's `_module`): no module of
# the user's is importable by such a name in a snippet of its own
TARGET_MODULE = "_fuzz_target"
# The line by which a snippet's module_file_lines have loaded the function's module as `_module`
MODULE_LOADED = "_module = importlib.util.module_from_spec(_spec)"


def display_name(function: Callable[..., Any]) -> str:
    """How reports name a function passed as a value: its qualified name, a partial as the call that makes it
    (on one line, cut to DISPLAY_WIDTH)."""
    if isinstance(function, functools.partial):
        arguments = [*map(repr, function.args), *(f"{key}={value!r}" for key, value in function.keywords.items())]
        text = " ".join(f"partial({', '.join([display_name(function.func), *arguments])})".split())
        return text if len(text) <= DISPLAY_WIDTH else text[:DISPLAY_WIDTH - 4] + "...)"
    name = getattr(function, "__qualname__", getattr(function, "__name__", None))
    return name if isinstance(name, str) else f"{type(function).__name__} instance"


def _partial_binding(partial: functools.partial) -> tuple[tuple[str, ...], str]:
    """The wrapped function's lines, then the partial rebuilt from its arguments where each one's repr is its
    value again (numbers, strings, None, containers of them, or an object such as a dataclass config whose class
    the snippet can name); otherwise a comment says to bind them."""
    lines, inner = snippet_binding(partial.func)
    name = "function" if inner != "function" else "bound"
    values = [*partial.args, *partial.keywords.values()]
    loaded = MODULE_LOADED in lines  # the function's module, from its file
    classes: dict[str, None] = {}  # the lines naming the classes of the arguments without a literal, each once
    for value in values:
        if not _round_trips(value):
            line = _class_line(value, partial.func, loaded)
            if line is None:
                return (*lines, f"# {name} is {display_name(partial)}: define it here, its arguments bound",
                        f"{name} = None"), name
            classes[line] = None
    arguments = [inner, *map(repr, partial.args), *(f"{key}={value!r}" for key, value in partial.keywords.items())]
    special = ["from math import inf, nan"] if any(type(v) is float and not math.isfinite(v) for v in values) else []
    return (*lines, *special, *classes, "import functools",
            f"{name} = functools.partial({', '.join(arguments)})"), name


def _class_line(value: object, function: Callable[..., Any], loaded: bool) -> str | None:
    """The line that names `value`'s class in a snippet, where `repr(value)` rebuilds an equal value from it (a
    dataclass config): from the function's own module where it is defined there and the snippet loads that module
    (`_module`), else imported from the module that defines it by that module's name; None where neither holds."""
    cls = type(value)
    name, module_name = cls.__qualname__, cls.__module__
    if not name.isidentifier():  # a nested or local class
        return None
    try:
        if eval(repr(value), {"__builtins__": {}, name: cls, "inf": math.inf, "nan": math.nan}) != value:
            return None
    except Exception:  # a repr that is no expression of the class, or an __eq__ that raises
        return None
    if loaded and _module_of(function)[1].get(name) is cls:
        return f"{name} = _module.{name}"
    module = sys.modules.get(module_name)
    if module_name == "__main__" or module_name.startswith(TARGET_MODULE) or getattr(module, name, None) is not cls:
        return None
    return f"from {module_name} import {name}"


def _round_trips(value: object) -> bool:
    """Whether `repr(value)` is `value` again in a snippet (which has `from math import inf, nan`)."""
    if type(value) is float:
        return True
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def module_file_lines(path: str, module_name: str, script: bool = False) -> tuple[str, ...]:
    """Python that loads the module in file `path` as `_module`, from any directory, with the file's folder on
    sys.path (as `python FILE` has it) so that the modules beside it import as they did. `script`: the file ran as
    __main__, so loading it runs its top level; say so where it does."""
    return (
        "import importlib.util",
        "import os",
        "import sys",
        f"_file = {string_literal(os.path.abspath(path))}",
        "sys.path.insert(0, os.path.dirname(_file))  # the file's folder, as `python FILE` has it",
        f"_name = {module_name!r}",
        "_spec = importlib.util.spec_from_file_location(_name, _file)",
        MODULE_LOADED,
        *(("# this runs the script's top level, a check() call there included, but not its "
           "`if __name__ == \"__main__\":` block",) if script else ()),
        "_spec.loader.exec_module(_module)",
    )


def _function_lines(function: Callable[..., Any]) -> tuple[tuple[str, ...], str]:
    """Python that binds `function`, and the name it binds: imported from its module's file (found from any
    directory, with that file's folder on the path for the modules beside it) where the module holds it by its
    name, or its source after its module's names (a function defined inside another one, a lambda), with its
    free variables assigned first where their values are literals; otherwise a comment saying to define it."""
    if inspect.ismethod(function):
        bound = _method_lines(function)
        if bound is not None:
            return bound
    path, names = _module_of(function)
    code = getattr(function, "__code__", None)
    for held in (getattr(function, "__name__", None), getattr(code, "co_name", None)):  # __name__ may be renamed
        if path and isinstance(held, str) and held.isidentifier() and names.get(held) is function:
            return _held_lines(function, path, names, held), held
    lines = module_file_lines(path, TARGET_MODULE, script=names.get("__name__") == "__main__") if path else ()
    name = _defined_name(function)
    source = None if inspect.ismethod(function) else _source(function, name)  # a method needs its instance
    free = _free_values(function)
    if source is None or free is None:
        why = "its source is unknown" if source is None else "it closes over values that are not literals"
        return (*lines, f"# {name} is not importable and {why}: define it here", f"{name} = None"), name
    # its source needs its module's names (the helpers it calls) around it, and its closure's values
    prelude = (*lines, "globals().update({k: v for k, v in vars(_module).items() if not k.startswith('__')})")
    return (*(prelude if path else ()), *free, *source), name


def _held_lines(value: object, path: str, names: dict[str, Any], held: str) -> tuple[str, ...]:
    """Python that binds `held`, the name by which the module of file `path` (its names `names`) holds `value`."""
    # a package's module may import its siblings relatively: loaded alone from its file it would not load, so it is
    # imported by its name, as the user's code imports it
    if names.get("__package__") and sys.modules.get(str(names.get("__name__"))) is inspect.getmodule(value):
        return (f"from {names['__name__']} import {held}",)
    return (*module_file_lines(path, TARGET_MODULE, script=names.get("__name__") == "__main__"),
            module_attribute_line(held))


def _method_lines(method: Any) -> tuple[tuple[str, ...], str] | None:
    """Python that binds a method bound to a class or object that its module holds by name (a
    torch.autograd.Function's `apply`, bound to the class), and the method's name; None for any other."""
    owner, name = method.__self__, getattr(method, "__name__", None)
    path, names = _class_module(owner if inspect.isclass(owner) else type(owner))
    held = next((key for key, value in names.items() if value is owner and key.isidentifier()), None)
    if not path or held is None or not isinstance(name, str) or not name.isidentifier():
        return None
    return (*_held_lines(owner, path, names, held), f"{name} = {held}.{name}"), name


def _class_module(cls: type) -> tuple[str | None, dict[str, Any]]:
    """The file and the names of the module that defines `cls`: from sys.modules, else (a module loaded from its
    path, not registered) from the globals of a function its body defines."""
    path, names = _module_of(cls)
    if path:
        return path, names
    for value in vars(cls).values():
        found = getattr(getattr(value, "__func__", value), "__globals__", None)  # a staticmethod's, a method's
        if isinstance(found, dict) and isinstance(found.get("__file__"), str):
            return found["__file__"], found
    return None, {}


def module_attribute_line(name: str) -> str:
    """`name = _module.name`, the line that binds the function from its loaded module; for a name too long for
    that to fit the terminal's columns, the same over two lines."""
    line = f"{name} = _module.{name}"
    return line if len(line) <= WIDTH else f"{name} = (\n    _module.{name})"


def _defined_name(function: Callable[..., Any]) -> str:
    """The name a def's source binds (the decorated function's, where a decorator wrapped it), else "function"
    (a lambda, a callable instance)."""
    name = getattr(getattr(_unwrapped(function), "__code__", None), "co_name", None)
    return name if isinstance(name, str) and name.isidentifier() else "function"


def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """The function a chain of functools.wraps decorators wraps (the function itself where the chain cycles)."""
    try:
        return inspect.unwrap(function)
    except ValueError:
        return function


def _module_of(function: Callable[..., Any]) -> tuple[str | None, dict[str, Any]]:
    """The file and the names of the module `function` belongs to (a decorator's wrapper, by functools.wraps, to
    the decorated function's); a module loaded from a path need not be in sys.modules: its globals are read."""
    module = inspect.getmodule(function)
    if isinstance(getattr(module, "__file__", None), str):
        return module.__file__, vars(module)  # type: ignore[union-attr]
    names = getattr(_unwrapped(function), "__globals__", {})
    path = names.get("__file__")
    return (path, names) if isinstance(path, str) else (None, {})


def _free_values(function: Callable[..., Any]) -> tuple[str, ...] | None:
    """`var = value` for each variable `function` closes over (a test's parameter, a factory's argument), or None
    where a value is not a literal (or a cell is empty)."""
    code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None) or ()
    if code is None or not code.co_freevars:
        return ()
    try:
        values = [cell.cell_contents for cell in cells]
    except ValueError:  # a cell not yet filled
        return None
    if not all(_round_trips(value) for value in values):
        return None
    return tuple(f"{var} = {value!r}  # from its closure" for var, value in zip(code.co_freevars, values))


def _source(function: Callable[..., Any], name: str) -> list[str] | None:
    """`function`'s source lines binding `name`: a def as written, a lambda as `name = (lambda ...)`."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return None
    if getattr(function, "__name__", None) != "<lambda>":
        return source.rstrip().splitlines()
    text = _lambda_text(source, function.__code__)
    return None if text is None else f"{name} = ({text}\n)".splitlines()  # a comment may end it


def _lambda_text(source: str, code: types.CodeType) -> str | None:
    """The lambda expression in `source` (the lines holding it, often a fragment of a larger statement) that
    compiles to `code`: each `lambda` there, cut at its longest end that parses inside brackets (so that its
    lines may break anywhere), is compiled and compared; None unless exactly one text matches."""
    found = set()
    for match in re.finditer(r"\blambda\b", source):
        for end in range(len(source), match.start(), -1):
            text = source[match.start():end]
            try:
                tree = ast.parse(f"({text}\n)", mode="eval")
            except (SyntaxError, ValueError):
                continue
            if not isinstance(tree.body, ast.Lambda):  # `lambda: a, b` parses, as a tuple: cut it shorter
                continue
            compiled = compile(tree, "<lambda>", "eval")
            inner = [const for const in compiled.co_consts if isinstance(const, types.CodeType)]
            if len(inner) == 1 and _code_key(inner[0]) == _code_key(code):
                found.add(text.strip())
            break  # the longest expression from this `lambda`
    return found.pop() if len(found) == 1 else None


def _code_key(code: types.CodeType) -> tuple[object, ...]:
    """What tells two lambdas of the same lines apart (not the bytes: the compiler picks other instructions for
    an expression compiled on its own)."""
    constants = tuple(repr(const) for const in code.co_consts if not isinstance(const, types.CodeType))
    names = tuple(sorted({*code.co_names, *code.co_freevars}))  # compiled alone, a free variable is a global
    return code.co_argcount, code.co_kwonlyargcount, code.co_varnames, names, constants
