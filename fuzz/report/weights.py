"""The gradient-weight figure: what each loss reduction does to a token's gradient (the RLHF book's point, 6.3.2,
in one picture), and the small log-log SVG plotting it is drawn with (the HTML report's benchmark panels use it
too).

For a batch of sequences of mixed lengths, d L / d l_it = w_i for every selected token of sequence i; the figure
plots w_i against n_i under each mode, from the exact reference (`reference.reduction`), not from a framework.
Per-sequence averaging (seq-mean-token-mean) gives a token of a short sequence more weight than one of a long
sequence; every other mode weighs all tokens of the batch alike, at a level that depends on what it divides by.

Pure Python and numpy: the SVG is self-contained (no fonts, scripts or links to fetch), so it renders the same in
the docs, in a browser and embedded in the HTML report.

    python -m fuzz.report.weights --out docs/gradient-weights.svg
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from fuzz.report.files import write_atomically
from reference.reduction import (
    MODES,
    SEQ_MEAN_TOKEN_MEAN,
    SEQ_MEAN_TOKEN_SUM,
    SEQ_MEAN_TOKEN_SUM_NORM,
    TOKEN_MEAN,
    TOKEN_SUM,
    reference,
    row_weights,
)

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
INK, MUTED, GRID, FRAME = "#1f2933", "#52606d", "#e4e7eb", "#9aa5b1"
# Okabe-Ito: distinguishable with every common colour-vision deficiency, and each series has its own marker too.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#7F7F7F")
MARKERS = ("circle", "square", "diamond", "triangle", "down")
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

DEFAULT_LENGTHS = (5, 20, 80, 320)
DEFAULT_WIDTH = 512


# ------------------------------------------------------------------------------------------- plot model

@dataclass(frozen=True)
class Series:
    """One line of a plot: its points (x, y > 0 on log axes), its look and its legend entry."""

    label: str
    points: tuple[tuple[float, float], ...]
    color: str
    marker: str = "circle"  # one of MARKERS, or "none"
    dashed: bool = False
    note: str = ""  # a second, smaller legend line (a formula, a kernel's name)
    key: str = ""  # the data-series attribute: what tests and scripts find the series by


@dataclass(frozen=True)
class Mark:
    """A vertical reference line with a label (the padded width, a cache size)."""

    x: float
    label: str


@dataclass(frozen=True)
class Panel:
    """One log-log plot: axes, series, and optional labelled x positions (the data's own, e.g. the lengths)."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    x_ticks: tuple[float, ...] = ()
    marks: tuple[Mark, ...] = ()
    x_format: Callable[[float], str] | None = None
    y_format: Callable[[float], str] | None = None
    rich: bool = False  # our own labels, with subscripts (n_i), not data


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float


# ------------------------------------------------------------------------------------------- log axes

def power_label(value: float) -> str:
    """1, 10, 100, 1000 and 0.1 as they are; other powers of ten as 10⁻³; anything else in %g."""
    exponent = math.log10(value)
    if abs(exponent - round(exponent)) > 1e-9:
        return f"{value:g}"
    exponent = round(exponent)
    return f"{value:g}" if -1 <= exponent <= 3 else "10" + str(exponent).translate(SUPERSCRIPT)


def log_range(values: Sequence[float]) -> tuple[float, float]:
    """Axis bounds around positive values: whole decades when they span two or more (labels at powers of ten
    read best), else the nearest 1-2-5 steps so a narrow range still fills the panel."""
    positive = [v for v in values if v > 0 and math.isfinite(v)] or [1.0]
    low, high = min(positive), max(positive)
    if high / low >= 100:
        return 10.0 ** math.floor(math.log10(low) + 1e-9), 10.0 ** math.ceil(math.log10(high) - 1e-9)
    steps = _one_two_five(low / 10, high * 10)
    below = max((s for s in steps if s <= low * (1 + 1e-9)), default=low / 2)
    above = min((s for s in steps if s >= high * (1 - 1e-9)), default=high * 2)
    if above <= below:  # a single value: one step either side
        below, above = below / 2, above * 2
    return below, above


def _one_two_five(low: float, high: float) -> list[float]:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    return [m * 10.0 ** k for k in range(first, last + 1) for m in (1, 2, 5)]


def major_ticks(low: float, high: float) -> list[float]:
    """Labelled ticks: decades, or 1-2-5 steps where the range spans fewer than two decades."""
    inside = [v for v in _one_two_five(low, high) if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)]
    decades = [v for v in inside if abs(math.log10(v) - round(math.log10(v))) < 1e-9]
    return decades if len(decades) >= 3 else inside


def minor_ticks(low: float, high: float) -> list[float]:
    """Unlabelled grid lines at 2..9 times each decade: they are what makes a log axis readable."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    return [m * 10.0 ** k for k in range(first, last + 1) for m in range(2, 10) if low < m * 10.0 ** k < high]


def _position(value: float, low: float, high: float, start: float, length: float) -> float:
    return start + length * (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low))


# ------------------------------------------------------------------------------------------- SVG pieces

def _number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


SUBSCRIPT = re.compile(r"_([A-Za-z]+)")


def subscripts(content: str) -> str:
    """Escaped text with the formulas' subscripts (n_i, L_max) set lower and smaller. dy, not baseline-shift,
    which not every browser supports; the second tspan moves the baseline back."""
    return SUBSCRIPT.sub(r'<tspan dy="0.3em" font-size="78%">\1</tspan><tspan dy="-0.3em">&#8203;</tspan>',
                         escape(content))


def text(x: float, y: float, content: str, size: float = 12, anchor: str = "start", fill: str = INK,
         weight: str = "normal", extra: str = "", rich: bool = False) -> str:
    """An escaped SVG <text>: labels come from data (implementation names), never trusted as markup. `rich`:
    our own formulas, with subscripts."""
    body = subscripts(content) if rich else escape(content)
    return (f'<text x="{_number(x)}" y="{_number(y)}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}"{extra}>{body}</text>')


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1, dash: str = "") -> str:
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{_number(x1)}" y1="{_number(y1)}" x2="{_number(x2)}" y2="{_number(y2)}" '
            f'stroke="{stroke}" stroke-width="{width}"{dashes}/>')


def marker(shape: str, x: float, y: float, color: str, tip: str = "", size: float = 4.5) -> str:
    """A filled marker with a white rim (so markers stay visible where lines cross), and a tooltip."""
    title = f"<title>{escape(tip)}</title>" if tip else ""
    style = f'fill="{color}" stroke="#ffffff" stroke-width="1.5"'
    if shape == "none":
        return ""
    if shape == "circle":
        return f'<circle cx="{_number(x)}" cy="{_number(y)}" r="{_number(size)}" {style}>{title}</circle>'
    if shape == "square":
        s = size * 0.9
        return (f'<rect x="{_number(x - s)}" y="{_number(y - s)}" width="{_number(2 * s)}" '
                f'height="{_number(2 * s)}" {style}>{title}</rect>')
    corners = {"diamond": ((0, -1.3), (1.3, 0), (0, 1.3), (-1.3, 0)),
               "triangle": ((0, -1.3), (1.2, 0.9), (-1.2, 0.9)),
               "down": ((0, 1.3), (1.2, -0.9), (-1.2, -0.9))}[shape]
    points = " ".join(f"{_number(x + dx * size)},{_number(y + dy * size)}" for dx, dy in corners)
    return f'<polygon points="{points}" {style}>{title}</polygon>'


def svg_document(width: float, height: float, body: Sequence[str], title: str, description: str = "") -> str:
    """A standalone SVG (XML namespace, viewBox, an accessible title): it scales with its container."""
    desc = f"<desc>{escape(description)}</desc>" if description else ""
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_number(width)} {_number(height)}" '
        f'width="{_number(width)}" height="{_number(height)}" role="img" font-family="{escape(FONT)}">',
        f"<title>{escape(title)}</title>{desc}",
        f'<rect x="0" y="0" width="{_number(width)}" height="{_number(height)}" fill="#ffffff"/>',
        *body,
        "</svg>",
    ]) + "\n"


# ------------------------------------------------------------------------------------------- a panel

@dataclass(frozen=True)
class _Axes:
    """A panel's data ranges mapped onto its box."""

    box: Box
    x_range: tuple[float, float]
    y_range: tuple[float, float]

    def x(self, value: float) -> float:
        return _position(value, *self.x_range, self.box.x, self.box.width)

    def y(self, value: float) -> float:
        return _position(value, *self.y_range, self.box.y + self.box.height, -self.box.height)


def _padded(bounds: tuple[float, float], fraction: float = 0.035) -> tuple[float, float]:
    """A little room at both ends, so a line on a decade is not drawn on the frame."""
    factor = (bounds[1] / bounds[0]) ** fraction
    return bounds[0] / factor, bounds[1] * factor


def _axes(panel: Panel, box: Box) -> _Axes:
    xs = [x for s in panel.series for x, _ in s.points] + [m.x for m in panel.marks] + list(panel.x_ticks)
    ys = [y for s in panel.series for _, y in s.points]
    return _Axes(box, _padded(log_range(xs)), _padded(log_range(ys)))


def _grid(axes: _Axes) -> list[str]:
    box, parts = axes.box, []
    for value in minor_ticks(*axes.x_range):
        parts.append(line(axes.x(value), box.y, axes.x(value), box.y + box.height, GRID, 0.6))
    for value in minor_ticks(*axes.y_range):
        parts.append(line(box.x, axes.y(value), box.x + box.width, axes.y(value), GRID, 0.6))
    for value in major_ticks(*axes.x_range):
        parts.append(line(axes.x(value), box.y, axes.x(value), box.y + box.height, "#cbd2d9", 1))
    for value in major_ticks(*axes.y_range):
        parts.append(line(box.x, axes.y(value), box.x + box.width, axes.y(value), "#cbd2d9", 1))
    return parts


def _x_labels(panel: Panel, axes: _Axes) -> list[str]:
    """The panel's own x ticks in bold, and the axis's where they do not collide with one (28 px apart)."""
    fmt, bottom = panel.x_format or power_label, axes.box.y + axes.box.height
    own = [axes.x(v) for v in panel.x_ticks]
    parts = [text(axes.x(v), bottom + 18, fmt(v), 12, "middle", INK, "600") for v in panel.x_ticks]
    parts += [line(x, bottom, x, bottom + 5, INK) for x in own]
    for value in major_ticks(*axes.x_range):
        if all(abs(axes.x(value) - x) >= 28 for x in own):
            parts.append(text(axes.x(value), bottom + 18, fmt(value), 11, "middle", MUTED))
            parts.append(line(axes.x(value), bottom, axes.x(value), bottom + 4, FRAME))
    return parts


def _y_labels(panel: Panel, axes: _Axes) -> list[str]:
    fmt = panel.y_format or power_label
    return [text(axes.box.x - 8, axes.y(v) + 4, fmt(v), 11, "end", MUTED) for v in major_ticks(*axes.y_range)]


def _series(panel: Panel, axes: _Axes) -> list[str]:
    """Each series in a <g class="series">: its line, then its markers on top."""
    parts = []
    for series in panel.series:
        points = sorted(series.points)
        path = " ".join(f"{'M' if i == 0 else 'L'}{_number(axes.x(x))},{_number(axes.y(y))}"
                        for i, (x, y) in enumerate(points))
        dash = ' stroke-dasharray="7 5"' if series.dashed else ""
        parts.append(f'<g class="series" data-series="{escape(series.key or series.label)}">')
        parts.append(f'<path d="{path}" fill="none" stroke="{series.color}" stroke-width="2.4" '
                     f'stroke-linejoin="round" stroke-linecap="round"{dash}/>')
        parts += [marker(series.marker, axes.x(x), axes.y(y), series.color, f"{series.label}: x = {x:g}, y = {y:.4g}")
                  for x, y in points]
        parts.append("</g>")
    return parts


def _marks(panel: Panel, axes: _Axes) -> list[str]:
    box, parts = axes.box, []
    for mark in panel.marks:
        x = axes.x(mark.x)
        parts.append(line(x, box.y, x, box.y + box.height, MUTED, 1.2, "3 4"))
        parts.append(text(x - 6, box.y + box.height - 8, mark.label, 11, "end", MUTED, extra=' font-style="italic"'))
    return parts


def panel_svg(panel: Panel, box: Box) -> list[str]:
    """One log-log panel in `box` (the plotting area; labels go around it): grid, frame, ticks, series."""
    axes = _axes(panel, box)
    frame = (f'<rect x="{_number(box.x)}" y="{_number(box.y)}" width="{_number(box.width)}" '
             f'height="{_number(box.height)}" fill="none" stroke="{FRAME}" stroke-width="1"/>')
    middle_y = box.y + box.height / 2
    return [
        '<g class="panel">',
        *_grid(axes), frame, *_marks(panel, axes), *_x_labels(panel, axes), *_y_labels(panel, axes),
        text(box.x + box.width / 2, box.y + box.height + 42, panel.x_label, 13, "middle", INK, rich=panel.rich),
        text(box.x - 56, middle_y, panel.y_label, 13, "middle", INK, rich=panel.rich,
             extra=f' transform="rotate(-90 {_number(box.x - 56)} {_number(middle_y)})"'),
        text(box.x, box.y - 12, panel.title, 14, "start", INK, "600") if panel.title else "",
        *_series(panel, axes),
        "</g>",
    ]


def legend_svg(series: Sequence[Series], x: float, y: float, rich: bool = False) -> list[str]:
    """One entry per series: a line sample with its marker, the label, and the note under it."""
    parts = ['<g class="legend">']
    for index, entry in enumerate(series):
        top = y + index * (42 if any(s.note for s in series) else 24)
        dash = "7 5" if entry.dashed else ""
        parts.append(line(x, top, x + 30, top, entry.color, 2.4, dash))
        parts.append(marker(entry.marker, x + 15, top, entry.color))
        parts.append(text(x + 40, top + 4, entry.label, 13, "start", INK, "600"))
        if entry.note:
            parts.append(text(x + 40, top + 20, entry.note, 11.5, "start", MUTED, rich=rich))
    parts.append("</g>")
    return parts


# ------------------------------------------------------------------------------------------- the figure

def mode_weights(lengths: Sequence[int], width: int, l_max: float) -> dict[str, np.ndarray]:
    """w_i of every mode for a batch of rows with `lengths` selected tokens out of `width`, from the exact
    reference (rows="all": D = B, the book's 1/B). The values of the losses do not enter w_i; ones keep them
    finite."""
    counts = np.asarray(lengths, dtype=np.int64)
    mask = np.arange(width)[None, :] < counts[:, None]
    losses = mask.astype(np.float64)
    return {mode: row_weights(reference(losses, mask, mode, "all", l_max if mode == SEQ_MEAN_TOKEN_SUM_NORM else None))
            for mode in MODES}


def _formulas(lengths: Sequence[int], l_max: float) -> dict[str, str]:
    """Each mode's weight in the book's terms (B rows, N tokens), with this batch's numbers filled in."""
    batch, tokens = len(lengths), sum(lengths)
    return {
        TOKEN_MEAN: f"per-token: w = 1/N, N = {tokens} tokens",
        SEQ_MEAN_TOKEN_MEAN: f"per-sequence: w = 1/(B·n_i), B = {batch}",
        SEQ_MEAN_TOKEN_SUM_NORM: f"fixed-length: w = 1/(B·L_max), L_max = {l_max:g}",
        SEQ_MEAN_TOKEN_SUM: f"w = 1/B = {1 / batch:g}",
        TOKEN_SUM: "w = 1",
    }


def _check_lengths(lengths: Sequence[int], width: int, l_max: float) -> None:
    if not lengths:
        raise ValueError("lengths must hold at least one sequence length")
    if any(not 1 <= int(n) <= width for n in lengths):  # a 0-length row has w = 0: nothing to show on log axes
        raise ValueError(f"every length must be between 1 and the width {width}, got {list(lengths)}")
    if not 0 < l_max < math.inf:
        raise ValueError(f"l_max must be a positive number, got {l_max!r}")


def _caption(lengths: Sequence[int], per_sequence: Series) -> str:
    """The book's point in words, with this batch's numbers: per-sequence averaging favours short sequences."""
    (short, most), (long, least) = min(per_sequence.points), max(per_sequence.points)
    return (f"Per sequence, a token of the {short:g}-token sequence weighs {most / least:g}× a token of the "
            f"{long:g}-token one; every other mode weighs all tokens of the batch alike.")


def weights_panel(lengths: Sequence[int], width: int, l_max: float) -> Panel:
    """One series per mode, in MODES order, each with its formula as the legend's note."""
    weights, formulas = mode_weights(lengths, width, l_max), _formulas(lengths, l_max)
    series = tuple(
        Series(mode, tuple((float(n), float(w)) for n, w in zip(lengths, weights[mode])), PALETTE[index],
               MARKERS[index % len(MARKERS)], note=formulas[mode], key=mode)
        for index, mode in enumerate(MODES))
    return Panel("", "selected tokens in the sequence, n_i", "per-token gradient weight  w_i = ∂L/∂l_it", series,
                 x_ticks=tuple(float(n) for n in sorted(set(lengths))), marks=(Mark(float(width), f"width {width}"),),
                 rich=True)


def _top_down(series: Sequence[Series]) -> list[Series]:
    """The legend in the order the lines leave the left edge, top first: each entry sits next to its line."""
    return sorted(series, key=lambda s: -min(s.points)[1])


def gradient_weights_svg(lengths: Sequence[int] = DEFAULT_LENGTHS, width: int = DEFAULT_WIDTH,
                         l_max: float | None = None) -> str:
    """The figure as a standalone SVG string: w_i against n_i on log-log axes, one series per mode. `l_max`
    (seq-mean-token-sum-norm's constant) defaults to `width`, Dr. GRPO's choice of the maximum length."""
    l_max = float(width if l_max is None else l_max)
    _check_lengths(lengths, width, l_max)
    panel = weights_panel(lengths, width, l_max)
    box = Box(96, 96, 580, 400)
    legend_x = box.x + box.width + 40
    title = "How each loss reduction weighs a token's gradient"
    subtitle = (f"A batch of B = {len(lengths)} sequences with n_i = {', '.join(map(str, lengths))} selected tokens, "
                f"padded to {width}: ∂L/∂l_it = w_i for every selected token of sequence i")
    per_sequence = next(s for s in panel.series if s.key == SEQ_MEAN_TOKEN_MEAN)
    body = [
        text(24, 36, title, 21, "start", INK, "700"),
        text(24, 62, subtitle, 13.5, "start", MUTED, rich=True),
        *panel_svg(panel, box),
        text(legend_x, box.y + 4, "mode   (rows = all: D = B)", 12, "start", MUTED, "600"),
        *legend_svg(_top_down(panel.series), legend_x, box.y + 34, rich=True),
        text(24, box.y + box.height + 82, _caption(lengths, per_sequence), 13.5, "start", INK),
    ]
    description = "; ".join(f"{s.key}: " + ", ".join(f"n={x:g} w={y:.4g}" for x, y in s.points)
                            for s in panel.series)
    return svg_document(1060, box.y + box.height + 106, body, title, description)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fuzz.report.weights --out PATH`: write the figure (atomically) and print where."""
    parser = argparse.ArgumentParser(prog="python -m fuzz.report.weights", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the SVG file to write, e.g. docs/gradient-weights.svg")
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)),
                        help="comma-separated selected-token counts, one per sequence (default %(default)s)")
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="the padded width (default %(default)s)")
    parser.add_argument("--l-max", type=float, default=None, help="fixed-length's L_max (default: the width)")
    args = parser.parse_args(argv)
    try:
        svg = gradient_weights_svg([int(n) for n in args.lengths.split(",")], args.width, args.l_max)
    except ValueError as error:
        parser.error(str(error))
    write_atomically(args.out, svg)
    print(f"gradient-weight figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
