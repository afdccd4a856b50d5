"""Arrays as Python literals for a snippet: nested lists, as every framework's constructor takes them, within the
terminal's columns; a run of one value written once with its count, so that a row reads as what it is.

A gradient of a loss reduction is one weight per row on its selected tokens and 0 on the others, and a mask of
prefix lengths is a run of True then a run of False: `[0.25] * 3 + [0.0] * 4` and `[True] * 3 + [False] * 4`
say it where 7 numbers would have to be read one by one, and keep the snippet short enough to be printed.
"""

from __future__ import annotations

import pprint

import numpy as np

INLINE_WIDTH = 40  # a literal this short stays on its call's line
LINE_WIDTH = 92  # a longer one's lines, indented 4 within the terminal's 100 columns
LAST_WIDTH = 56  # its last line, followed by at most `, dtype=ml_dtypes.bfloat16, device='cuda:0'))`
INDENT = "\n    "
RUN = 3  # a value this many times in a row is written once, with its count


def literal(values: np.ndarray) -> str:
    return _written(np.asarray(values, dtype=np.float64))  # nan and inf come from `from math import`


def bool_literal(values: np.ndarray) -> str:
    return _written(np.asarray(values, dtype=bool))


def _written(values: np.ndarray) -> str:
    """Inline where short; else on lines of their own inside the call's brackets (valid Python there), laid out by
    rows (`_filled`), so that `name = torch.tensor(<this>, dtype=..., device=...)` keeps within 100 columns."""
    plain = repr(values.tolist())
    if len(plain) <= INLINE_WIDTH:
        return plain
    uniform = _uniform(values)
    if uniform is not None and len(uniform) <= INLINE_WIDTH:
        return uniform
    if values.ndim not in (1, 2) or not values.size:  # no contract has such arrays; kept valid all the same
        return INDENT + pprint.pformat(values.tolist(), width=LAST_WIDTH, compact=True).replace("\n", INDENT)
    rows = [values] if values.ndim == 1 else list(values)
    return INDENT + INDENT.join(_filled([_row_words(row) for row in rows], values.ndim))


def _uniform(values: np.ndarray) -> str | None:
    """`[[0.0] * 7] * 4` for an array whose elements all print the same (an all-False mask, a gradient of zeros at
    every position); None for any other array."""
    if values.ndim == 0 or values.size < 2:
        return None
    flat = values.ravel().tolist()
    first = repr(flat[0])  # by their text: 0.0 and -0.0 differ, nan equals nan
    if any(repr(value) != first for value in flat):
        return None
    text = first
    for size in reversed(values.shape):
        text = f"[{text}] * {size}"
    return text


def _plain_words(texts: list[str]) -> list[str]:
    """`[a, b, c]` as words: `[a,`, `b,`, `c]`."""
    return [("[" if number == 0 else "") + text + ("]" if number == len(texts) - 1 else ",")
            for number, text in enumerate(texts)]


def _row_words(row: np.ndarray) -> list[str]:
    """A 1-d row as words to fill lines with (a line may break between any two): its runs of RUN or more equal
    values as `[v] * n`, the values between them as a plain list, joined by `+`, where that is at most three
    quarters of the plain list; else the plain list."""
    texts = [repr(value) for value in row.tolist()]
    chunks: list[list[str] | tuple[str, int]] = []  # plain stretches and (value, count) runs
    start = 0
    while start < len(texts):
        end = start
        while end < len(texts) and texts[end] == texts[start]:
            end += 1
        if end - start >= RUN:
            chunks.append((texts[start], end - start))
        elif chunks and isinstance(chunks[-1], list):
            chunks[-1].extend(texts[start:end])
        else:
            chunks.append(texts[start:end])
        start = end
    words: list[str] = []
    for chunk in chunks:
        if words:
            words[-1] += " +"
        words += [f"[{chunk[0]}] * {chunk[1]}"] if isinstance(chunk, tuple) else _plain_words(chunk)
    plain = _plain_words(texts)
    # runs that save little make a row harder to read than its values one by one: `[False, False, True] +
    # [False] * 3 + [True]`
    return words if 4 * len(" ".join(words)) <= 3 * len(" ".join(plain)) else plain


def _filled(rows: list[list[str]], ndim: int) -> list[str]:
    """The rows' words filled into lines of LINE_WIDTH (pprint's compact layout: a 2-d list opens with `[[`, a row
    that fits on one line shares it with the next ones that fit, a longer row starts a line and its own later lines
    are one column further in); the last row's lines as wide as leaves the last line within LAST_WIDTH."""
    lines: list[str] = []
    shared = False  # whether the last line holds whole rows only, so that another whole row may join it
    for number, words in enumerate(rows):
        final = number == len(rows) - 1
        opening = ("[" if number == 0 else " ") if ndim == 2 else ""
        closing = ("]" if final else ",") if ndim == 2 else ""
        words = [*words[:-1], words[-1] + closing]
        continuation = " " * (len(opening) + 1)  # inside the row's bracket
        for width in range(LINE_WIDTH, LAST_WIDTH - 1, -1) if final else (LINE_WIDTH,):
            own = _lines(opening, continuation, words, width)
            if not final or len(own[-1]) <= LAST_WIDTH:
                break
        if shared and len(own) == 1 and len(lines[-1]) + len(own[0]) <= (LAST_WIDTH if final else LINE_WIDTH):
            lines[-1] += own[0]  # `[a, b],` then ` [c, d],`: the row's opening space separates them
        else:
            lines += own
        shared = len(own) == 1
    return lines


def _lines(opening: str, continuation: str, words: list[str], width: int) -> list[str]:
    """`words` filled greedily into lines of `width`, the first starting with `opening`, the others indented."""
    lines, line = [], opening + words[0]
    for word in words[1:]:
        if len(line) + 1 + len(word) > width:
            lines.append(line)
            line = continuation + word
        else:
            line = f"{line} {word}"
    return [*lines, line]
