"""The conformance matrix (rows implementation x device, columns dtypes) and the JSON report."""

from __future__ import annotations

import json
from collections.abc import Sequence

from fuzz.campaign import CellResult
from fuzz.failures import for_terminal, is_compile_failure, shorten


def _cell_text(cell: CellResult | None) -> str:
    if cell is None or not cell.applicable:
        return "n/a"
    if not cell.ok:
        return "FAIL"
    return f"{cell.examples} ex, {cell.worst:.2f}"


def render_matrix(results: Sequence[CellResult], dtypes: Sequence[str], notes: dict[str, str]) -> str:
    """One row per (implementation, device, check); a cell gives examples run and worst err/tol, or FAIL."""
    rows: dict[tuple[str, str, str], dict[str, CellResult]] = {}
    for cell in results:
        rows.setdefault((cell.subject, cell.device, cell.check), {})[cell.dtype] = cell
    header = ["implementation", "device", "check", *dtypes, "layouts"]
    table = [header]
    for (subject, device, check), cells in rows.items():
        layouts = next(iter(cells.values())).layouts
        layout_text = ", ".join(layouts) + (f" ({notes[subject]})" if subject in notes else "")
        table.append([subject, device, check, *[_cell_text(cells.get(d)) for d in dtypes], layout_text])
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = []
    for index, row in enumerate(table):
        lines.append("  ".join(text.ljust(width) for text, width in zip(row, widths)) + "  " + row[-1])
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  " + "-" * 7)
    lines.append("cells: examples run, worst error/tolerance over all checks (<= 1 conforms); n/a: not applicable")
    return "\n".join(lines)


def _traceback_for_terminal(cell: CellResult) -> str:
    """A compiler's output fills the traceback too: its first and last lines (the JSON keeps it whole)."""
    assert cell.traceback is not None
    return shorten(cell.traceback, head=12, tail=8) if any(map(is_compile_failure, cell.failures)) else cell.traceback


def render_failures(results: Sequence[CellResult]) -> str:
    """Every failure with its minimal case; the traceback and snippet of the first one in full."""
    parts = []
    for cell in results:
        if cell.ok:
            continue
        if parts:
            parts.append(f"\n=== FAIL {cell.subject} on {cell.device}, {cell.dtype}, {cell.check}: "
                         + "; ".join(for_terminal(failure).split("\n", 1)[0] for failure in cell.failures)
                         + " (snippet in the JSON report)")
            continue
        story = ", ".join(f"{label}={value!r}" for label, value in cell.story if label != "seed")
        parts.append(
            f"\n=== FAIL {cell.subject} on {cell.device}, {cell.dtype}, {cell.check} ===\n"
            + "\n".join(f"  - {for_terminal(failure)}" for failure in cell.failures)
            + (f"\n  minimal case: {story}" if story else "")
            + (f"\n  traceback:\n{_traceback_for_terminal(cell)}" if cell.traceback else "")
            + ("\n  reproduce with this snippet:\n\n" + cell.snippet if cell.snippet else "")
        )
    return "\n".join(parts)


def write_json(path: str, results: Sequence[CellResult], meta: dict[str, object]) -> None:
    with open(path, "w") as handle:
        json.dump({**meta, "ok": all(cell.ok for cell in results),
                   "cells": [cell.as_json() for cell in results]}, handle, indent=2)
