"""The printed table and the PNG plot of a run's records, grouped by contract: each row's "% of floor" is against
the floor of its own contract's bytes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.records import FLOOR, Record
from bench.sizes import DEVICES, SIZES
from impls.registry import builtin_names
from reference.contracts import CONTRACT_NAMES


def _contract_rank(record: Record) -> int:
    return CONTRACT_NAMES.index(record.contract) if record.contract in CONTRACT_NAMES else len(CONTRACT_NAMES)


def _order(record: Record) -> tuple[int, str, int, str, int, int, int, str]:
    device = DEVICES.index(record.device) if record.device in DEVICES else len(DEVICES)
    size = next((i for i, s in enumerate(SIZES.values()) if s.name == record.size), len(SIZES))
    names = (FLOOR, *builtin_names(record.contract))
    rank = names.index(record.implementation) if record.implementation in names else len(names)
    return (_contract_rank(record), record.label, device, record.dtype, size, record.batch * record.tokens, rank,
            record.implementation)


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


# A row whose median beside the floor (what its % of floor is from) and its own median differ by more than this
# factor ran under a load that changed during the run: its two numbers do not describe the same conditions.
UNSTEADY = 2.0


def unsteady(record: Record) -> bool:
    """Whether the row's % of floor and its median were timed under loads too different to read together."""
    paired, own = record.paired_median_s, record.median_s
    return bool(paired and own) and max(paired / own, own / paired) > UNSTEADY  # type: ignore[operator]


def table(records: list[Record], floor_kernels: Callable[[Record], str | None] | None = None) -> str:
    """Rows grouped by contract, device, dtype and size, each group's floor first (marked with its kernel); a
    fraction marked `~` where the row's two timings disagree (`unsteady`), with a note under the table."""
    header = ("contract", "implementation", "device", "dtype", "size", "median", "GB/s", "% of floor")
    ordered = sorted(records, key=_order)
    rows = []
    for record in ordered:
        name = record.implementation
        if name == FLOOR and floor_kernels is not None:
            name = f"floor ({floor_kernels(record)})"
        fraction = "" if record.fraction_of_floor is None else f"{100 * record.fraction_of_floor:.1f}%"
        fraction += " ~" if fraction and unsteady(record) else ""
        rows.append((record.label, name, record.device, record.dtype, f"{record.size} {record.batch}x{record.tokens}",
                     format_seconds(record.median_s), f"{record.gbps:.2f}", fraction))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    right = {5, 6, 7}

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))

    lines = [line(header), "  ".join("-" * w for w in widths)]
    previous = None
    for record, row in zip(ordered, rows):
        group = (record.label, record.device, record.dtype, record.size)
        if previous is not None and group != previous:
            lines.append("")
        previous = group
        lines.append(line(row))
    if any(map(unsteady, ordered)):
        lines += ["", f"~: the row's median beside the floor (its % of floor) and its own median differ by more than "
                      f"{UNSTEADY:g}x: the machine's load changed during the run; rerun it (--cpus pins it)"]
    return "\n".join(lines)


def _panel_order(panel: tuple[str, str, str, str]) -> tuple[int, str, int, str]:
    contract, label, device, dtype = panel
    rank = CONTRACT_NAMES.index(contract) if contract in CONTRACT_NAMES else len(CONTRACT_NAMES)
    return rank, label, DEVICES.index(device) if device in DEVICES else len(DEVICES), dtype


def plot(records: list[Record], path: Path) -> Path | None:
    """GB/s against bytes moved, one line per implementation and the floor dashed; one panel per
    (contract, device, dtype). Returns None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = sorted({(r.contract, r.label, r.device, r.dtype) for r in records}, key=_panel_order)
    if not panels:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for axis, (_, label, device, dtype) in zip(axes[0], panels):
        panel = sorted((r for r in records if (r.label, r.device, r.dtype) == (label, device, dtype)),
                       key=lambda r: r.bytes)
        for name in sorted({r.implementation for r in panel}, key=lambda n: (n != FLOOR, n)):
            points = [r for r in panel if r.implementation == name]
            style = {"color": "black", "linestyle": "--", "linewidth": 2} if name == FLOOR else {"marker": "o"}
            axis.plot([r.bytes for r in points], [r.gbps for r in points], label=name, **style)
            if name == FLOOR:
                for r in points:
                    axis.annotate(r.size, (r.bytes, r.gbps), textcoords="offset points", xytext=(0, 6),
                                  ha="center", fontsize=8)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("bytes moved per call")
        axis.set_ylabel("GB/s")
        axis.set_title(f"{label}: {device} {dtype}")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return Path(path)
