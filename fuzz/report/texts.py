"""Failure texts made short enough for a terminal.

A torch.compile compiler failure carries the compiler's whole output (460 to 640 KB of g++ errors were
seen): it is a real failure (the function cannot run on that input), but a terminal shows its first and
last lines, under a label saying what happened; the JSON report keeps the full text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from impls.frameworks import FRAMEWORK_NAMES, adapter_class


def compiler_failure_label(message: str) -> str | None:
    """The label of a failure that a framework's compiler raised (the adapters name their compilers'
    exceptions), or None for any other failure."""
    first = message.split("\n", 1)[0]
    if not first.startswith(("raised ", "backward raised ")):
        return None
    for name in FRAMEWORK_NAMES:
        adapter = adapter_class(name)
        if any(error in first for error in adapter.compiler_errors):
            return adapter.compiler_label
    return None


def is_compile_failure(message: str) -> bool:
    return compiler_failure_label(message) is not None


def checked_through(contract: Any, arguments: Sequence[str], pick: str = "") -> str:
    """`lambda <the call's parameters>: fn(<arguments>)<pick>`: how a hint shows a user's function `fn` checked
    through a lambda, the step's keywords passed on where the contract's call has them."""
    keywords = ("**keywords",) if contract.keywords else ()
    return f"lambda {', '.join((*contract.input_names, *keywords))}: fn({', '.join((*arguments, *keywords))}){pick}"


def named_in_a_file(name: str) -> str:
    """How the command line checks a lambda a hint shows (it loads FILE:function, never an expression)."""
    return f"on the command line: `{name} = lambda ...` in a file of yours, checked as FILE:{name}"


def a_type_name(value: object) -> str:
    """`value`'s type name with its article, as a message says it: "a float", "an int", "a NoneType"."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def shorten(text: str, head: int = 6, tail: int = 4, max_line: int = 300) -> str:
    """The first `head` and last `tail` lines of a long text (each cut to `max_line` characters)."""
    lines = [line if len(line) <= max_line else line[:max_line] + " ..." for line in text.splitlines()]
    if len(lines) <= head + tail + 1:
        return "\n".join(lines)
    return "\n".join([*lines[:head], f"[... {len(lines) - head - tail} more lines; the JSON report has them all ...]",
                      *lines[-tail:]])


def for_terminal(message: str) -> str:
    """A failure message as a terminal shows it: a compile failure labelled and shortened, others as they are."""
    label = compiler_failure_label(message)
    return message if label is None else f"{label}: {shorten(message)}"


WIDTH = 100  # the terminal's columns: every line a run prints, and a snippet printed whole only where all its lines fit
STRING_PIECE = 64  # a long string literal's pieces: within 100 columns after an indent and a name


def string_literal(text: str, indent: str = "    ") -> str:
    """`repr(text)`, or where it is long (a deep path) a parenthesized concatenation of pieces: within 100 columns."""
    if len(repr(text)) <= STRING_PIECE:
        return repr(text)
    pieces = [text[start:start + STRING_PIECE] for start in range(0, len(text), STRING_PIECE)]
    return "(" + f"\n{indent}".join(map(repr, pieces)) + ")"
