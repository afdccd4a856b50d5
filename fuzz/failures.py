"""Failure texts made short enough for a terminal.

A torch.compile compiler failure carries the compiler's whole output (460 to 640 KB of g++ errors were
seen): it is a real failure (the function cannot run on that input), but a terminal shows its first and
last lines, under a label saying what happened; the JSON report keeps the full text."""

from __future__ import annotations

COMPILE_LABEL = "torch.compile failed to compile this input"
# Exception names torch.compile raises when its backend (inductor, the C++ compiler) fails.
_COMPILE_ERRORS = ("InductorError", "BackendCompilerFailed", "CppCompileError", "CompilationError")

def is_compile_failure(message: str) -> bool:
    first = message.split("\n", 1)[0]
    return first.startswith(("raised ", "backward raised ")) and any(name in first for name in _COMPILE_ERRORS)


def shorten(text: str, head: int = 6, tail: int = 4, max_line: int = 300) -> str:
    """The first `head` and last `tail` lines of a long text (each cut to `max_line` characters)."""
    lines = [line if len(line) <= max_line else line[:max_line] + " ..." for line in text.splitlines()]
    if len(lines) <= head + tail + 1:
        return "\n".join(lines)
    return "\n".join([*lines[:head], f"[... {len(lines) - head - tail} more lines; the JSON report has them all ...]",
                      *lines[-tail:]])


def for_terminal(message: str) -> str:
    """A failure message as a terminal shows it: a compile failure labelled and shortened, others as they are."""
    if is_compile_failure(message):
        return f"{COMPILE_LABEL}: {shorten(message)}"
    return message
