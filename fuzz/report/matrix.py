"""The whole conformance matrix (rows implementation x device x check, columns dtypes): `--matrix`'s view, wider than
a terminal (the default view is fuzz/report/terminal.py's summary)."""

from __future__ import annotations

from collections.abc import Sequence

from fuzz.report.results import CellResult


def _ulps(value: float) -> str:
    return "inf ulp" if value == float("inf") else f"{value:.3g} ulp"


NOT_RUN = "not run"  # a planned cell the run never reached: it stopped at its first failing cell (--fail-fast)


def _cell_text(cell: CellResult | None) -> str:
    if cell is None:
        return NOT_RUN
    if not cell.applicable:
        return "n/a"
    nondeterministic = " ~" if cell.deterministic is False else ""
    if not cell.ok:
        return "FAIL" + (f" ({len(cell.bugs)} bugs)" if len(cell.bugs) > 1 else "") + nondeterministic
    return f"{cell.examples} ex, {cell.worst:.2f}, {_ulps(cell.worst_ulps)}{nondeterministic}"


def render_matrix(results: Sequence[CellResult], dtypes: Sequence[str], notes: dict[str, str]) -> str:
    """One row per (implementation, device, check); a cell gives examples run and worst err/tol, or FAIL."""
    rows: dict[tuple[str, str, str, str], dict[str, CellResult]] = {}
    for cell in results:
        rows.setdefault((cell.subject, cell.contract, cell.device, cell.check), {})[cell.dtype] = cell
    header = ["implementation", "contract", "device", "check", *dtypes, "layouts"]
    table = [header]
    for (subject, contract, device, check), cells in rows.items():
        layouts = next(iter(cells.values())).layouts
        layout_text = ", ".join(layouts) + (f" ({notes[subject]})" if subject in notes else "")
        table.append([subject, contract, device, check, *[_cell_text(cells.get(d)) for d in dtypes], layout_text])
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = []
    for index, row in enumerate(table):
        lines.append("  ".join(text.ljust(width) for text, width in zip(row, widths)) + "  " + row[-1])
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  " + "-" * 7)
    precisions = sorted({cell.precision for cell in results if cell.applicable})
    stopped = any(NOT_RUN in row for row in table[1:])
    lines.append("cells: examples run, worst error/tolerance over all checks (<= 1 conforms), worst error in "
                 "units in the last place of the input dtype; n/a: not applicable; "
                 + (f"{NOT_RUN}: the run stopped at its first failing cell (--fail-fast); " if stopped else "")
                 + "precision: " + ", ".join(precisions))
    lines.append(_determinism_note(results))
    return "\n".join(lines)


def _determinism_note(results: Sequence[CellResult]) -> str:
    """Whether two calls on the same inputs gave bitwise identical results: a fact, not a verdict."""
    checked = [cell for cell in results if cell.deterministic is not None]
    varying = [cell for cell in checked if not cell.deterministic]
    if not checked:
        return "determinism: not checked"
    if not varying:
        return f"determinism: in all {len(checked)} checked cells, two calls on the same inputs gave identical bits"
    return (f"determinism: ~ marks {len(varying)} of {len(checked)} cells where two calls on the same inputs gave "
            "different bits (not a failure; RL losses that must reproduce need deterministic kernels)")
