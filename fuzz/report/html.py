"""One self-contained HTML page for a report: a fuzz run (`python -m fuzz` or `check`: the dict `write_json`
writes, with "cells") or benchmark records (`{"kind": "bench", "records": [...]}`). A fuzz run's page draws the
figures that explain the contracts it checked (data with "figures", {name: svg}, shows those instead).

The page fetches nothing: CSS, script and plots are inline, figures are data: URIs, and a Content-Security-Policy
forbids any other source (so even a string that escaped escaping could load nothing). The static parts (verdict,
matrix, bugs, tables, plots) are rendered here, so the page reads without scripts; a small script adds a cell's
details on click and copy buttons, reading the whole report dict embedded as JSON (`embedded_data` reads it back):
the page carries exactly the data the JSON report carries. Every string from the data is escaped: snippets and
tracebacks are arbitrary text.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from fuzz.report.files import write_atomically
from fuzz.report.results import BugKey, bug_keys, case_title, one_per_cell
from fuzz.report.weights import (
    PALETTE,
    Box,
    Mark,
    Panel,
    Series,
    gradient_weights_svg,
    legend_svg,
    panel_svg,
    svg_document,
)

FUZZ, BENCH = "fuzz", "bench"
DTYPE_ORDER = ("float16", "bfloat16", "float32", "float64")
FLOOR = "floor"  # bench.records.FLOOR; fuzz/ does not import bench/ (neither layer imports the other)
DATA_ID = "report-data"
NONFINITE = "$float"  # JSON.parse reads no Infinity or NaN: such floats travel as {"$float": "Infinity"}
# A small bar chart, drawn inline: no icon font to load, and not every font has a stopwatch glyph.
ICON = ('<svg width="28" height="28" viewBox="0 0 28 28" aria-hidden="true"><rect x="3" y="15" width="5" height="10" '
        'rx="1" fill="currentColor"/><rect x="11.5" y="9" width="5" height="16" rx="1" fill="currentColor"/>'
        '<rect x="20" y="3" width="5" height="22" rx="1" fill="currentColor"/></svg>')
OWN_KEYS = {"cells", "records", "figures", "kind", "versions", "machine", "ok"}  # shown in a place of their own


# ------------------------------------------------------------------------------------------- entry points

def report_kind(data: dict[str, Any]) -> str:
    """"fuzz" for a report with cells, "bench" for one with records."""
    if "cells" in data:
        return FUZZ
    if "records" in data:
        return BENCH
    raise ValueError("report data needs 'cells' (a fuzz run) or 'records' (benchmark records), "
                     f"got keys {sorted(data)}")


def render_html(data: dict[str, Any]) -> str:
    """The whole page for `data`, as one string."""
    kind = report_kind(data)
    title, body = (_fuzz_title(data), _fuzz_body(data)) if kind == FUZZ else ("Benchmark report", _bench_body(data))
    figures = data.get("figures") or (contract_figures(data["cells"]) if kind == FUZZ else {})
    return _page(title, [*body, *_figures(figures)], data)


def write_html(path: str, data: dict[str, Any]) -> None:
    """Render first, then write atomically: a failure at either step leaves no half page at `path`."""
    write_atomically(path, render_html(data))


def embedded_data(page: str) -> dict[str, Any]:
    """The report dict a page carries (the inverse of the embedding in render_html)."""
    found = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page, re.S)
    if found is None:
        raise ValueError(f"no <script id={DATA_ID}> in the page")
    return json.loads(found.group(1), object_hook=_untag)


# ------------------------------------------------------------------------------------------- the embedded JSON

def _tag(value: Any) -> Any:
    """Non-finite floats as tagged objects (the JSON reports hold Infinity: worst ulps of a NaN output)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {NONFINITE: repr(value).replace("inf", "Infinity").replace("nan", "NaN")}
    if isinstance(value, dict):
        return {key: _tag(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tag(item) for item in value]
    return value


def _untag(item: dict[str, Any]) -> Any:
    return float(item[NONFINITE].replace("Infinity", "inf")) if set(item) == {NONFINITE} else item


def data_json(data: dict[str, Any]) -> str:
    """Strict JSON safe inside <script>: every <, > and & escaped as \\u003c (they only occur in strings there),
    so a snippet holding "</script>" cannot end the element; U+2028/9 too, for any reader that evals it."""
    text = json.dumps(_tag(data), allow_nan=False, ensure_ascii=False)
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


# ------------------------------------------------------------------------------------------- the page

def _page(title: str, body: Sequence[str], data: dict[str, Any]) -> str:
    # The script runs under its hash only: a <script> smuggled in by data would not run even if it were markup.
    script_hash = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    policy = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'; "
              "base-uri 'none'; form-action 'none'")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>", '<main class="page">',
        *body,
        '<footer class="footer">This page is self-contained: it carries the whole report as JSON '
        f'(<code>script#{DATA_ID}</code>) and loads nothing.</footer>',
        "</main>",
        f'<script type="application/json" id="{DATA_ID}">{data_json(data)}</script>',
        f"<script>{SCRIPT}</script>", "</body>", "</html>",
    ]) + "\n"


def _section(anchor: str, heading: str, content: Iterable[str], note: str = "") -> list[str]:
    lead = f'<p class="note">{note}</p>' if note else ""
    return [f'<section class="card" id="{anchor}">', f"<h2>{escape(heading)}</h2>", lead, *content, "</section>"]


def breakable(text: str) -> str:
    """Escaped, with line-break chances after / : _ . (a corpus path as a row label wraps at its parts)."""
    return re.sub(r"([/:_.])", r"\1<wbr>", escape(text))


def _text(value: Any) -> str:
    """Any value as escaped text: strings as they are, mappings as `key: value` pairs, lists comma-joined."""
    if isinstance(value, dict):
        return "; ".join(f"{escape(str(k))}: {_text(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) or "none"
    if isinstance(value, float):
        return escape(f"{value:.4g}")
    return escape(str(value))


def _facts(rows: Iterable[tuple[str, str]]) -> str:
    """A definition list of (label, html) pairs; the html is already escaped."""
    items = "".join(f"<div><dt>{escape(label)}</dt><dd>{value}</dd></div>" for label, value in rows)
    return f'<dl class="facts">{items}</dl>'


def _environment(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The versions and the machine, where the data has them (a verdict holds for the stack it ran on)."""
    rows = []
    for key in ("versions", "machine"):
        value = data.get(key)
        if isinstance(value, dict):
            rows += [(f"{key[:-1] if key == 'versions' else key}: {name}", _text(item)) for name, item in value.items()]
        elif value is not None:
            rows.append((key, _text(value)))
    return rows


def _other_meta(data: dict[str, Any], shown: set[str]) -> list[tuple[str, str]]:
    """Every key not shown elsewhere, so that nothing in the data is missing from the page."""
    return [(key.replace("_", " "), _text(value)) for key, value in data.items() if key not in OWN_KEYS | shown]


# ------------------------------------------------------------------------------------------- fuzz: verdict

@dataclass(frozen=True)
class BugGroup:
    """One distinct bug (fuzz/report/results.py, `bug_keys`): the same kind of failure of the same subject and
    contract on the same engine, in every cell (device, dtype, check, split) it showed in; each occurrence keeps its
    own minimal case and snippet."""

    number: int
    kind: str
    implementation: str
    contract: str
    engine: str  # "" in process
    occurrences: tuple[tuple[int, int], ...]  # (cell index, bug index in that cell)


def bug_groups(cells: Sequence[dict[str, Any]]) -> list[BugGroup]:
    occurrences = [(str(cell.get("implementation")), str(cell.get("contract")), str(cell.get("check")), bug["kind"])
                   for cell in cells for bug in cell.get("bugs") or []]
    key = bug_keys(occurrences)
    found: dict[BugKey, list[tuple[int, int]]] = {}
    for index, cell in enumerate(cells):
        for number, bug in enumerate(cell.get("bugs") or []):
            found.setdefault(key(str(cell.get("implementation")), str(cell.get("contract")), str(cell.get("check")),
                                 bug["kind"]), []).append((index, number))
    return [BugGroup(n, kind, impl, contract, engine, tuple(one_per_cell(where, lambda occurrence: occurrence[0])))
            for n, ((impl, contract, engine, kind), where) in enumerate(found.items(), 1)]


def cell_problems(cell: dict[str, Any]) -> list[str]:
    """Failures with no case to show (a worker died): as_json puts them first in "failures", before the bugs'."""
    failures = list(cell.get("failures") or [])
    from_bugs = sum(len(bug.get("failures") or []) for bug in cell.get("bugs") or [])
    return failures[:max(len(failures) - from_bugs, 0)]


def _fuzz_title(data: dict[str, Any]) -> str:
    if data.get("command") == "check":
        return f"check {data.get('target', '')}"
    return "Conformance campaign"


def _verdict(cells: Sequence[dict[str, Any]], groups: Sequence[BugGroup]) -> str:
    failing = sum(not cell.get("ok", True) for cell in cells)
    problems = sum(bool(cell_problems(cell)) for cell in cells)
    applicable = sum(bool(cell.get("applicable", True)) for cell in cells)
    if not cells:
        return '<div class="verdict info"><div><strong>No cells</strong><span>nothing was fuzzed</span></div></div>'
    if not failing:
        return (f'<div class="verdict pass"><span class="mark">✓</span><div><strong>Conforms</strong>'
                f"<span>every one of the {applicable} applicable cells passed ({len(cells)} cells in all)</span>"
                "</div></div>")
    bugs = f"{len(groups)} distinct bug{'s' if len(groups) != 1 else ''}"
    extra = f", and {problems} cell{'s' if problems != 1 else ''} failed without a case" if problems else ""
    return (f'<div class="verdict fail"><span class="mark">✗</span><div><strong>{bugs}{extra}</strong>'
            f"<span>{failing} of {len(cells)} cells failed; each bug below with its minimal case and a snippet "
            "that reproduces it</span></div></div>")


PRECISIONS = {
    "contract": "accumulations in at least float32; elementwise steps may round in the input dtype",
    "strict": "the built-ins' stricter promise: sums in at least float32, rounded once to the output dtype",
}
MASKED = {
    "any": "masked positions may hold anything (-inf and NaN included): they must be ignored",
    "finite": "masked positions assumed finite (declared by the caller)",
}


def _assumptions(data: dict[str, Any], cells: Sequence[dict[str, Any]]) -> list[str]:
    """What the verdict holds under: precision, masked values, contract; then how it was run, and where."""
    precisions = sorted({str(c.get("precision")) for c in cells if c.get("applicable", True)})
    contracts = [str(data["contract"])] if "contract" in data else sorted({str(c.get("contract")) for c in cells})
    masked = data.get("masked_values")
    rows = [
        ("precision", "<br>".join(f"<b>{escape(p)}</b>: {escape(PRECISIONS.get(p, ''))}" for p in precisions)),
        ("masked values", f"<b>{escape(str(masked))}</b>: {escape(MASKED.get(str(masked), ''))}" if masked
         else "not recorded"),
        ("contract", "<br>".join(map(escape, contracts))),
    ]
    shown = {"contract", "masked_values"} | ({"seconds"} if isinstance(data.get("seconds"), (int, float)) else set())
    return _section("assumptions", "Assumptions and provenance", [
        _facts(rows), _facts(_run_facts(data) + _other_meta(data, shown | RUN_KEYS) + _environment(data))],
        "The verdict holds under these assumptions, for the stack and machine it ran on.")


RUN_KEYS = {"command", "command_line", "target", "framework", "sharded", "seed", "max_examples", "skipped"}


def _run_facts(data: dict[str, Any]) -> list[tuple[str, str]]:
    labels = {"command": "command", "command_line": "command line", "target": "target", "framework": "framework",
              "sharded": "sharded over", "seed": "seed", "max_examples": "max examples per cell"}
    rows = [(label, f"<code>{_text(data[key])}</code>") for key, label in labels.items() if key in data]
    if isinstance(data.get("seconds"), (int, float)):
        rows.append(("wall time", f"{data['seconds']:.1f} s"))
    if data.get("skipped"):
        rows.append(("skipped", _text(data["skipped"])))
    return rows  # "seconds" that is no number falls to _other_meta, shown as it is


# ------------------------------------------------------------------------------------------- fuzz: heatmap

HEAT = ((0.0, (232, 245, 236)), (0.5, (214, 236, 153)), (0.8, (251, 212, 109)), (1.0, (244, 162, 89)))


def heat_colour(ratio: float) -> str:
    """err/tol on 0..1 (clamped) as a light green-to-amber ramp: dark text stays readable on every shade."""
    ratio = min(max(ratio if math.isfinite(ratio) else 1.0, 0.0), 1.0)
    for (low, a), (high, b) in itertools.pairwise(HEAT):
        if ratio <= high:
            t = (ratio - low) / (high - low)
            return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))
    return "#" + "".join(f"{x:02x}" for x in HEAT[-1][1])


def _dtypes(cells: Sequence[dict[str, Any]]) -> list[str]:
    seen = list(dict.fromkeys(str(c.get("dtype")) for c in cells))
    return sorted(seen, key=lambda d: (DTYPE_ORDER.index(d) if d in DTYPE_ORDER else len(DTYPE_ORDER), seen.index(d)))


Row = tuple[str, str, str, str]  # implementation, contract, device, check


def _rows(cells: Sequence[dict[str, Any]]) -> dict[Row, dict[str, int]]:
    rows: dict[Row, dict[str, int]] = {}
    for index, cell in enumerate(cells):
        key = tuple(str(cell.get(k)) for k in ("implementation", "contract", "device", "check"))
        rows.setdefault(key, {})[str(cell.get("dtype"))] = index  # type: ignore[index]
    return rows


def _ulps(value: Any) -> str:
    return "inf ulp" if isinstance(value, float) and math.isinf(value) else f"{float(value or 0):.3g} ulp"


def _cell_html(index: int | None, cell: dict[str, Any] | None, where: str) -> str:
    """One heatmap cell: n/a grey, FAIL red, else its err/tol as colour and number (~: not deterministic)."""
    if cell is None:  # the run stopped at its first failing cell (--fail-fast) before this one
        return f'<td class="cell na" title="{escape(where)}: not run">not run</td>'
    ident = f'data-cell="{index}" tabindex="0" role="button"'
    if not cell.get("applicable", True):
        return f'<td class="cell na" {ident} title="{escape(where)}: not applicable">n/a</td>'
    varies = cell.get("deterministic") is False
    tilde = ' <span class="tilde" title="two calls gave different bits">~</span>' if varies else ""
    if not cell.get("ok", True):
        bugs = len(cell.get("bugs") or [])
        sub = f"{bugs} bug{'s' if bugs != 1 else ''}" if bugs else "no case"
        return (f'<td class="cell fail" {ident} title="{escape(where)}: FAIL">'
                f'<span class="big">FAIL</span><span class="small">{sub}{tilde}</span></td>')
    ratio = float(cell.get("worst_error_over_tolerance") or 0.0)
    info = f"{cell.get('examples', 0)} ex · {_ulps(cell.get('worst_ulps'))}"
    return (f'<td class="cell pass" {ident} style="background:{heat_colour(ratio)}" '
            f'title="{escape(where)}: worst err/tol {ratio:.3g}">'
            f'<span class="big">{ratio:.2f}</span><span class="small">{info}{tilde}</span></td>')


def heatmap(cells: Sequence[dict[str, Any]]) -> str:
    """The conformance matrix: rows implementation x contract x device x check, columns dtypes."""
    dtypes = _dtypes(cells)
    head = "".join(f"<th>{escape(h)}</th>" for h in ("implementation", "contract", "device", "check"))
    head += "".join(f'<th class="dtype">{escape(d)}</th>' for d in dtypes)
    body = []
    for row, by_dtype in _rows(cells).items():
        labels = "".join(f'<th scope="row" class="{name}">{breakable(text)}</th>'
                         for name, text in zip(("impl", "contract", "device", "check"), row))
        tds = "".join(_cell_html(by_dtype.get(d), cells[by_dtype[d]] if d in by_dtype else None,
                                 " · ".join((*row, d))) for d in dtypes)
        body.append(f"<tr>{labels}{tds}</tr>")
    return (f'<div class="scroll"><table class="heatmap" id="heatmap"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _heat_legend(stopped: bool) -> str:
    """The colour scale with its ticks under it, then the other kinds of cell (`stopped`: some were not run)."""
    stops = ", ".join(f"{heat_colour(at)} {100 * at:.0f}%" for at, _ in HEAT)
    return ('<div class="legend"><span>worst err/tol</span><span class="scale"><span class="ramp" '
            f'style="background:linear-gradient(90deg, {stops})"></span>'
            '<span class="ticks"><span>0</span><span>0.5</span><span>1</span></span></span>'
            '<span class="muted">1 = the tolerance</span>'
            '<span class="swatch fail">FAIL</span><span class="muted">a bug</span>'
            '<span class="swatch na">n/a</span><span class="muted">not applicable</span>'
            + ('<span class="swatch na">not run</span><span class="muted">the run stopped at its first failing cell '
               '(--fail-fast)</span>' if stopped else '')
            + '<span class="muted"><b>~</b> two calls gave different bits</span></div>')


def _some_not_run(cells: Sequence[dict[str, Any]]) -> bool:
    """Whether the heatmap has an empty cell: a row with a dtype the run never reached."""
    dtypes = _dtypes(cells)
    return any(len(by_dtype) < len(dtypes) for by_dtype in _rows(cells).values())


def _matrix(cells: Sequence[dict[str, Any]]) -> list[str]:
    details = ('<aside class="details" id="details" aria-live="polite"><p class="muted">Click a cell to see its '
               "examples, errors, determinism, layouts and bugs.</p></aside>")
    return _section("matrix", "Conformance matrix", [
        _heat_legend(_some_not_run(cells)), f'<div class="matrix-grid">{heatmap(cells)}{details}</div>'],
        "Each cell: the worst error over tolerance across every check (≤ 1 conforms), examples run and the worst "
        "error in units in the last place of the input dtype.")


# ------------------------------------------------------------------------------------------- fuzz: bugs

def _copyable(text: str, label: str) -> str:
    """A <pre> of escaped text with a copy button (the script copies the pre's text, not markup)."""
    return (f'<div class="code"><button type="button" class="copy" aria-label="copy the {escape(label)}">Copy'
            f"</button><pre><code>{escape(text)}</code></pre></div>")


def _case_table(case: dict[str, Any] | None) -> str:
    if not case:
        return '<p class="muted">no minimal case recorded</p>'
    rows = "".join(f"<tr><th>{escape(str(k))}</th><td><code>{escape(str(v))}</code></td></tr>" for k, v in case.items())
    return f'<table class="case">{rows}</table>'


def _occurrence(cells: Sequence[dict[str, Any]], index: int, number: int) -> str:
    """One bug as one cell found it: failures, minimal case, snippet, traceback."""
    bug = cells[index]["bugs"][number]
    failures = "".join(f"<li>{escape(str(f))}</li>" for f in bug.get("failures") or [])
    trace = bug.get("traceback")
    traceback = f"<details><summary>traceback</summary><pre>{escape(trace)}</pre></details>" if trace else ""
    return (f'<div class="occurrence" id="bug-{index}-{number}"><h4>failures</h4><ul class="failures">{failures}</ul>'
            f"<h4>{case_title(bug.get('counterexample') or ())}</h4>{_case_table(bug.get('counterexample'))}"
            f"<h4>snippet that reproduces it</h4>{_copyable(str(bug.get('snippet') or ''), 'snippet')}{traceback}"
            "</div>")


def _where(cell: dict[str, Any]) -> str:
    return f"{cell.get('device')} · {cell.get('check')} · {cell.get('dtype')}"  # as the matrix names a cell


def _bug_card(cells: Sequence[dict[str, Any]], group: BugGroup) -> str:
    """A distinct bug: where it showed, the first cell's case in full, every other cell's folded under it."""
    (first, number), *others = group.occurrences
    seen = ", ".join(escape(_where(cells[i])) for i, _ in group.occurrences)
    folded = "".join(f"<details><summary>the same bug in {escape(_where(cells[i]))}: its own minimal case and "
                     f"snippet</summary>{_occurrence(cells, i, n)}</details>" for i, n in others)
    return (f'<article class="bug" id="bug-group-{group.number}"><header><span class="badge">bug {group.number}'
            f'</span><h3>{escape(group.kind)}</h3></header><p class="where"><b>{escape(group.implementation)}</b> · '
            f"{escape(group.contract)}{escape(f' · {group.engine}' if group.engine else '')} — in {seen}</p>"
            f"<p class='muted'>the minimal case and snippet from {escape(_where(cells[first]))}"
            f"{'; each other cell’s under it' if others else ''}</p>{_occurrence(cells, first, number)}{folded}"
            "</article>")


def _problems(cells: Sequence[dict[str, Any]]) -> list[str]:
    """Cells that failed with no case to show (a worker died, a call never came back)."""
    items = [f"<li><b>{escape(' · '.join(str(c.get(k)) for k in ('implementation', 'device', 'dtype', 'check')))}"
             f"</b>: {escape(problem)}</li>" for c in cells for problem in cell_problems(c)]
    return [f'<div class="problems"><h3>Failures without a case</h3><ul>{"".join(items)}</ul></div>'] if items else []


def _bugs(cells: Sequence[dict[str, Any]], groups: Sequence[BugGroup]) -> list[str]:
    if not groups and not _problems(cells):
        return []
    return _section("bugs", f"Bugs ({len(groups)} distinct)", [
        *_problems(cells), *(_bug_card(cells, group) for group in groups)],
        "Each distinct bug (a kind of failure of one implementation, in every cell it shows in), shrunk on its own: "
        "run its snippet to reproduce it.")


def _fuzz_body(data: dict[str, Any]) -> list[str]:
    cells = list(data["cells"])
    groups = bug_groups(cells)
    kicker = f"lossnorm-difftest · {escape(str(data.get('command', 'fuzz')))} report"
    header = [f'<header class="top"><div class="kicker">{kicker}</div><h1>{escape(_fuzz_title(data))}</h1>',
              _verdict(cells, groups), "</header>"]
    return [*header, *_assumptions(data, cells), *_matrix(cells), *_bugs(cells, groups)]


# ------------------------------------------------------------------------------------------- bench

def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_bytes(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.3g} B"


def contract_label(record: dict[str, Any]) -> str:
    """The contract a record times and its bound parameters, "reduction (token-mean)"; "" for a record written
    before the benchmarks named their contract."""
    contract, parameters = str(record.get("contract") or ""), str(record.get("parameters") or "")
    return f"{contract} ({parameters})" if contract and parameters else contract


def _record_order(record: dict[str, Any]) -> tuple[Any, ...]:
    """Grouped by contract, device, dtype and size (each contract's rows against its own floor); each group's
    floor first (the yardstick), then by name."""
    size = int(record.get("batch", 0)) * int(record.get("tokens", 0))
    return (contract_label(record), str(record.get("device")), str(record.get("dtype")), size,
            record.get("implementation") != FLOOR, str(record.get("implementation")))


def _bench_row(record: dict[str, Any]) -> str:
    fraction = record.get("fraction_of_floor")
    floor = record.get("implementation") == FLOOR
    bar = "" if fraction is None else (
        f'<span class="bar"><span style="width:{min(max(float(fraction), 0.0), 1.0) * 100:.1f}%"></span></span>'
        f"{100 * float(fraction):.1f}%")
    cells = (escape(contract_label(record)), escape(str(record.get("implementation"))),
             escape(str(record.get("device"))), escape(str(record.get("dtype"))),
             f"{record.get('batch')}×{record.get('tokens')}", format_seconds(float(record.get("median_s", 0))),
             format_bytes(float(record.get("bytes", 0))), f"{float(record.get('gbps', 0)):.2f}", bar)
    return f"<tr{' class=floor' if floor else ''}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def bench_table(records: Sequence[dict[str, Any]]) -> str:
    head = ("contract", "implementation", "device", "dtype", "batch×tokens", "median", "bytes moved", "GB/s",
            "% of floor")
    rows, previous = [], None
    for record in sorted(records, key=_record_order):
        group = _record_order(record)[:4]
        if previous is not None and group != previous:
            rows.append(f'<tr class="gap"><td colspan="{len(head)}"></td></tr>')
        previous = group
        rows.append(_bench_row(record))
    names = "".join(f"<th>{escape(h)}</th>" for h in head)
    return (f'<div class="scroll"><table class="bench" id="bench-table"><thead><tr>{names}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _colours(records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """One colour per implementation across every panel; the floor black."""
    names = sorted({str(r.get("implementation")) for r in records} - {FLOOR})
    return {FLOOR: "#1f2933", **{name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}}


def _sizes(records: Sequence[dict[str, Any]]) -> tuple[Mark, ...]:
    """A dotted line at each size's bytes, labelled batch×tokens: which point is which size."""
    sizes = {float(r["bytes"]): f"{r.get('batch')}×{r.get('tokens')}" for r in records}
    return tuple(Mark(x, label) for x, label in sorted(sizes.items()))


def bench_panel_svg(records: Sequence[dict[str, Any]], device: str, dtype: str, colours: dict[str, str],
                    contract: str = "") -> str:
    """GB/s against bytes moved for one (contract, device, dtype): a line per implementation, the floor dashed."""
    names = sorted({str(r.get("implementation")) for r in records}, key=lambda n: (n != FLOOR, n))
    series = tuple(
        Series(name, tuple((float(r["bytes"]), float(r["gbps"])) for r in records
                           if r.get("implementation") == name and float(r.get("gbps", 0)) > 0),
               colours[name], "square" if name == FLOOR else "circle", dashed=name == FLOOR, key=name)
        for name in names)
    series = tuple(s for s in series if s.points)
    where = f"{device} · {dtype}"
    panel = Panel(f"{contract} · {where}" if contract else where, "bytes moved per call", "GB/s", series,
                  marks=_sizes(records), x_format=format_bytes)
    box = Box(84, 48, 560, 360)
    body = [*panel_svg(panel, box), *legend_svg(series, box.x + box.width + 28, box.y + 12)]
    title = f"Throughput of {contract} on {device}, {dtype}" if contract else f"Throughput on {device}, {dtype}"
    # Inline in HTML, an <svg> needs no xmlns (the parser gives it its namespace): the page names no URL at all.
    return svg_document(box.x + box.width + 200, box.y + box.height + 64, body,
                        title).replace(' xmlns="http://www.w3.org/2000/svg"', "", 1)


def bench_plots(records: Sequence[dict[str, Any]]) -> str:
    """One panel per (contract, device, dtype): inline SVG (the HTML parser puts it in the SVG namespace itself)."""
    colours = _colours(records)

    def key(record: dict[str, Any]) -> tuple[str, str, str]:
        return contract_label(record), str(record.get("device")), str(record.get("dtype"))

    figures = []
    for contract, device, dtype in sorted({key(r) for r in records}):
        panel = [r for r in records if key(r) == (contract, device, dtype)]
        figures.append(f'<figure class="panel">{bench_panel_svg(panel, device, dtype, colours, contract)}</figure>')
    return f'<div class="panels" id="bench-plots">{"".join(figures)}</div>'


def _bench_summary(records: Sequence[dict[str, Any]]) -> str:
    names = {str(r.get("implementation")) for r in records} - {FLOOR}
    contracts = sorted({contract_label(r) for r in records} - {""})
    where = sorted({f"{r.get('device')} {r.get('dtype')}" for r in records})
    of = f" of {escape('; '.join(contracts))}" if contracts else ""
    return (f'<div class="verdict info"><span class="mark">{ICON}</span><div><strong>{len(records)} rows</strong>'
            f"<span>{len(names)} implementations{of} against the memory-bandwidth floor of each contract's bytes, "
            f"on {escape(', '.join(where))}</span></div></div>")


def _bench_body(data: dict[str, Any]) -> list[str]:
    records = list(data["records"])
    header = ['<header class="top"><div class="kicker">lossnorm-difftest · benchmark report</div>',
              "<h1>Benchmark report</h1>", _bench_summary(records), "</header>"]
    facts = _other_meta(data, set()) + _environment(data)
    meta = _section("provenance", "Provenance", [_facts(facts)]) if facts else []
    return [*header, *meta,
            *_section("throughput", "Throughput", [bench_plots(records)],
                      "GB/s against bytes moved per call, log-log, a panel per contract, device and dtype: each "
                      "implementation next to the floor, the fastest floor kernel's bandwidth on the bytes that "
                      "contract moves (dashed)."),
            *_section("records", "Records", [bench_table(records)])]


# ------------------------------------------------------------------------------------------- figures

def contract_figures(cells: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The figures that explain the contracts the cells checked, drawn for the page (the JSON keeps data only):
    for the loss reductions, the per-token gradient weight against sequence length under each mode."""
    if not any(str(cell.get("contract", "")).startswith(("reduction", "accumulation")) for cell in cells):
        return {}
    return {"gradient weight per token against sequence length": gradient_weights_svg()}


def _figures(figures: dict[str, str]) -> list[str]:
    """Each figure as an <img> of a data: URI: shown as drawn, but inert (an SVG image runs no script)."""
    if not figures:
        return []
    items = [f'<figure class="figure"><img alt="{escape(name)}" src="data:image/svg+xml;base64,'
             f'{base64.b64encode(svg.encode()).decode()}"><figcaption>{escape(name)}</figcaption></figure>'
             for name, svg in figures.items()]
    return _section("figures", "Figures", items)


# ------------------------------------------------------------------------------------------- style and script

STYLE = """
:root { --ink: #1f2933; --muted: #52606d; --line: #e4e7eb; --bg: #f5f7fa; --card: #fff; --fail: #c62828;
  --pass: #1b7f4b; --na: #e4e7eb; --accent: #0b6bcb; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); line-height: 1.45;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; }
.page { max-width: 1360px; margin: 0 auto; padding: 28px 28px 40px; }
.top { margin-bottom: 18px; }
.kicker { color: var(--muted); font-size: 13px; letter-spacing: .04em; text-transform: uppercase; }
h1 { margin: 4px 0 14px; font-size: 28px; overflow-wrap: anywhere; }
h2 { margin: 0 0 6px; font-size: 19px; }
h3 { margin: 0; font-size: 16px; }
h4 { margin: 14px 0 6px; font-size: 13px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.note { margin: 0 0 14px; color: var(--muted); font-size: 14px; }
.muted { color: var(--muted); font-size: 13px; }
.verdict { display: flex; gap: 14px; align-items: center; padding: 14px 18px; border-radius: 10px;
  border: 1px solid; }
.verdict .mark { font-size: 30px; line-height: 1; }
.verdict strong { display: block; font-size: 20px; }
.verdict span { font-size: 14px; }
.verdict.pass { background: #e8f5ec; border-color: #a7d7b8; color: #14532d; }
.verdict.fail { background: #fdecea; border-color: #f1aeb5; color: #7f1d1d; }
.verdict.info { background: #e8f1fb; border-color: #b6d0ee; color: #12355b; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 18px 20px;
  margin: 0 0 18px; box-shadow: 0 1px 2px rgba(16, 24, 40, .04); }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 8px 24px; margin: 0 0 10px; }
.facts div { border-left: 3px solid var(--line); padding-left: 10px; }
.facts dt { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.facts dd { margin: 2px 0 0; overflow-wrap: anywhere; font-size: 14px; }
.scroll { overflow-x: auto; }
.matrix-grid { display: grid; grid-template-columns: minmax(0, 1fr) 380px; gap: 18px; align-items: start; }
@media (max-width: 1100px) { .matrix-grid { grid-template-columns: 1fr; } }
table { border-collapse: collapse; }
.heatmap th, .heatmap td { padding: 6px 10px; text-align: left; font-size: 13.5px; }
.heatmap thead th { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em;
  border-bottom: 2px solid var(--line); }
.heatmap thead th.dtype { text-align: center; }
.heatmap tbody th { font-weight: 500; border-bottom: 1px solid var(--line); white-space: nowrap; }
.heatmap tbody th.impl { font-weight: 650; white-space: normal; max-width: 300px; }
.heatmap td.cell { min-width: 118px; text-align: center; border: 2px solid #fff; border-radius: 6px;
  cursor: pointer; vertical-align: middle; }
.heatmap td.cell:focus-visible, .heatmap td.cell.selected { outline: 3px solid var(--accent); outline-offset: -3px; }
.cell .big { display: block; font-size: 16px; font-weight: 650; font-variant-numeric: tabular-nums; }
.cell .small { display: block; font-size: 11.5px; color: #3e4c59; }
.cell.fail { background: var(--fail); color: #fff; }
.cell.fail .small { color: #ffe3e3; }
.cell.na { background: var(--na); color: #7b8794; font-size: 13px; cursor: default; }
.cell.na[data-cell] { cursor: pointer; }
.tilde { font-weight: 700; }
.legend { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 14px; margin: 0 0 12px; font-size: 13px; }
.legend .scale { display: inline-flex; flex-direction: column; width: 180px; padding-top: 12px; }
.legend .ramp { display: block; height: 12px; border-radius: 6px; border: 1px solid #d9dee3; }
.legend .ticks { display: flex; justify-content: space-between; color: var(--muted); font-size: 11px; }
.swatch { padding: 1px 8px; border-radius: 4px; font-size: 12px; font-weight: 650; }
.swatch.fail { background: var(--fail); color: #fff; }
.swatch.na { background: var(--na); color: #7b8794; }
.details { background: #fafbfc; border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px;
  font-size: 14px; position: sticky; top: 12px; }
.details h3 { font-size: 15px; overflow-wrap: anywhere; }
.details dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; margin: 10px 0; }
.details dt { color: var(--muted); }
.details dd { margin: 0; overflow-wrap: anywhere; }
.status { display: inline-block; padding: 1px 8px; border-radius: 4px; font-size: 12px; font-weight: 700; }
.status.fail { background: var(--fail); color: #fff; }
.status.pass { background: #d1f0dc; color: #14532d; }
.status.na { background: var(--na); color: #52606d; }
.details ul { margin: 4px 0; padding-left: 18px; }
.bug { border: 1px solid #f1c4c8; border-left: 5px solid var(--fail); border-radius: 8px; padding: 14px 16px;
  margin: 14px 0 0; }
.bug header { display: flex; gap: 10px; align-items: center; }
.badge { background: var(--fail); color: #fff; border-radius: 999px; padding: 1px 10px; font-size: 12px;
  font-weight: 700; white-space: nowrap; }
.bug .where { margin: 6px 0 0; font-size: 14px; overflow-wrap: anywhere; }
.failures { margin: 0; padding-left: 18px; font-size: 13.5px; }
.failures li { margin: 2px 0; overflow-wrap: anywhere; }
table.case { font-size: 13px; }
table.case th { text-align: left; color: var(--muted); font-weight: 500; padding: 2px 16px 2px 0; white-space: nowrap; }
table.case td { padding: 2px 0; }
.code { position: relative; }
.code pre, details pre { background: #0f172a; color: #e2e8f0; padding: 14px 16px; border-radius: 8px;
  overflow: auto; max-height: 420px; font-size: 12.5px; line-height: 1.5; margin: 0; }
.copy { position: absolute; top: 8px; right: 10px; border: 1px solid #475569; background: #1e293b; color: #e2e8f0;
  border-radius: 6px; padding: 3px 10px; font-size: 12px; cursor: pointer; }
.copy:hover { background: #334155; }
.copy.done { background: var(--pass); border-color: var(--pass); }
details { margin-top: 10px; }
summary { cursor: pointer; color: var(--accent); font-size: 14px; }
.problems { border-left: 5px solid var(--fail); padding: 4px 14px; }
table.bench { width: 100%; font-size: 14px; font-variant-numeric: tabular-nums; }
table.bench th { text-align: left; font-size: 12px; color: var(--muted); text-transform: uppercase;
  letter-spacing: .04em; border-bottom: 2px solid var(--line); padding: 6px 10px; }
table.bench td { padding: 5px 10px; border-bottom: 1px solid var(--line); }
table.bench tr.floor td { background: #f1f5f9; font-weight: 600; }
table.bench tr.gap td { border: 0; padding: 6px; }
.bar { display: inline-block; width: 90px; height: 8px; background: #e4e7eb; border-radius: 4px;
  margin-right: 8px; vertical-align: middle; overflow: hidden; }
.bar span { display: block; height: 100%; background: var(--accent); }
.panels { display: flex; flex-wrap: wrap; gap: 10px 24px; }
.panels figure, .figure { margin: 0; }
.panels svg, .figure img { max-width: 100%; height: auto; }
.figure figcaption { color: var(--muted); font-size: 13px; }
.footer { color: var(--muted); font-size: 12.5px; text-align: center; margin-top: 8px; }
"""

# Built with textContent and createElement only: nothing from the data is ever parsed as markup.
SCRIPT = r"""
(function () {
  "use strict";
  var source = document.getElementById("report-data");
  var data = JSON.parse(source.textContent, function (key, value) {
    if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 1 &&
        typeof value["$float"] === "string") { return Number(value["$float"]); }
    return value;
  });
  window.reportData = data;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function num(value, digits) {
    if (value === null || value === undefined) { return "not recorded"; }
    if (!isFinite(value)) { return value > 0 ? "inf" : (value < 0 ? "-inf" : "nan"); }
    return Number(value).toPrecision(digits).replace(/\.?0+(e|$)/, "$1");
  }
  function breakable(text) {  // zero-width spaces after / : _ . so a corpus path wraps at its parts
    return String(text).replace(/([\/:_.])/g, "$1\u200b");
  }
  function fact(list, label, value) {
    list.appendChild(el("dt", "", label));
    var dd = el("dd");
    if (value instanceof Node) { dd.appendChild(value); } else { dd.textContent = String(value); }
    list.appendChild(dd);
  }
  function determinism(value) {
    if (value === true) { return "two calls gave identical bits"; }
    if (value === false) { return "two calls gave different bits"; }
    return "not checked";
  }
  function bugLinks(index, cell) {
    var list = el("ul");
    (cell.bugs || []).forEach(function (bug, number) {
      var item = el("li"), link = el("a", "", bug.kind);
      link.href = "#bug-" + index + "-" + number;
      link.addEventListener("click", function () {
        var target = document.getElementById("bug-" + index + "-" + number);
        var folded = target && target.closest("details");
        if (folded) { folded.open = true; }
      });
      item.appendChild(link);
      item.appendChild(document.createTextNode(": " + (bug.failures || []).length + " failure(s)"));
      list.appendChild(item);
    });
    return list;
  }
  function status(cell) {
    if (cell.applicable === false) { return el("span", "status na", "n/a"); }
    return cell.ok ? el("span", "status pass", "conforms") : el("span", "status fail", "FAIL");
  }
  function showCell(index) {
    var cell = data.cells[index], panel = document.getElementById("details");
    if (!cell || !panel) { return; }
    panel.textContent = "";
    panel.appendChild(el("h3", "", breakable([cell.implementation, cell.device, cell.dtype, cell.check].join(" · "))));
    var list = el("dl");
    fact(list, "verdict", status(cell));
    fact(list, "contract", cell.contract);
    fact(list, "examples", cell.examples);
    fact(list, "worst err/tol", num(cell.worst_error_over_tolerance, 4));
    fact(list, "worst ulps", num(cell.worst_ulps, 4));
    fact(list, "determinism", determinism(cell.deterministic));
    fact(list, "layouts", (cell.layouts || []).join(", ") || "none");
    fact(list, "seconds", num(cell.seconds, 3));
    fact(list, "precision", cell.precision);
    panel.appendChild(list);
    if ((cell.bugs || []).length) {
      panel.appendChild(el("h4", "", "bugs"));
      panel.appendChild(bugLinks(index, cell));
    } else if ((cell.failures || []).length) {
      panel.appendChild(el("h4", "", "failures"));
      var failures = el("ul");
      cell.failures.forEach(function (text) { failures.appendChild(el("li", "", text)); });
      panel.appendChild(failures);
    }
    document.querySelectorAll("td.cell.selected").forEach(function (node) { node.classList.remove("selected"); });
    var chosen = document.querySelector('td.cell[data-cell="' + index + '"]');
    if (chosen) { chosen.classList.add("selected"); }
  }
  document.querySelectorAll("td.cell[data-cell]").forEach(function (node) {
    var index = Number(node.getAttribute("data-cell"));
    node.addEventListener("click", function () { showCell(index); });
    node.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); showCell(index); }
    });
  });
  if (data.cells && data.cells.length) {  // the first failing cell, else the first: the panel is never blank
    var first = data.cells.findIndex(function (cell) { return cell.ok === false; });
    showCell(first >= 0 ? first : 0);
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) { return navigator.clipboard.writeText(text); }
    return new Promise(function (resolve, reject) {  // file:// pages may lack the async clipboard
      var area = el("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      var copied = document.execCommand("copy");
      document.body.removeChild(area);
      if (copied) { resolve(); } else { reject(new Error("copy refused")); }
    });
  }
  document.querySelectorAll("button.copy").forEach(function (button) {
    button.addEventListener("click", function () {
      var code = button.parentNode.querySelector("pre");
      copyText(code.textContent).then(function () {
        button.textContent = "Copied";
        button.classList.add("done");
      }, function () {
        button.textContent = "Select and copy";
        var range = document.createRange();
        range.selectNodeContents(code);
        window.getSelection().removeAllRanges();
        window.getSelection().addRange(range);
      });
      setTimeout(function () { button.textContent = "Copy"; button.classList.remove("done"); }, 1600);
    });
  });
})();
"""
