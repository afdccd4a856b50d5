"""Standard output that a reader may close early (`lossnorm-fuzz check ... | head -3`): the run goes on to its
verdict, its exit status and its report files, and what is printed after the close goes nowhere."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class _TolerantStdout:
    """`stream`, where a write or flush into a closed pipe sends the rest of the output to os.devnull."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _discard_the_rest(self) -> None:
        # Onto the file descriptor too: the interpreter's own flush at exit would fail on the pipe again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._discard_the_rest()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._discard_the_rest()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def tolerate_a_closed_stdout() -> Iterator[None]:
    """Within it, sys.stdout survives its reader going away; everything printed is flushed before it ends."""
    original = sys.stdout
    sys.stdout = _TolerantStdout(original)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = original
