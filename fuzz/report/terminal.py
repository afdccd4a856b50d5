"""What a run prints, every line within WIDTH columns: a progress line per cell, a summary of one line per
implementation and contract, and every distinct bug (shrunk) with its minimal case and its snippet. The whole
matrix is `--matrix` (fuzz/report/matrix.py) and in the JSON and HTML reports.

A snippet that would not fit (large inputs: a float16 counterexample of two 4096-token rows is ~100 KB of
literals, or lines wider than the terminal) is written to a file, and its path printed instead."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from fuzz.report.files import write_atomically
from fuzz.report.results import Bug, BugKey, CellResult, bug_keys, case_title, one_per_cell, split_and_pass
from fuzz.report.texts import WIDTH, for_terminal, is_compile_failure, shorten
from reference.dtypes import DTYPE_NAMES

# a progress line's numbers, as wide as they come at ten times the default budget:
# "  403 ex, 7.73e-05, 1.23e+03 ulp, 12.3 s"
TAIL_ROOM = 40
SUBJECT_TAIL = 8  # a progress line keeps at least this much of a long name's end ("...y:step"), else it is cut
SNIPPET_LINES = 80  # a snippet longer than this goes to a file
COLUMNS = 54  # the summary's columns besides the implementation's, their gaps and indent included


def fit(text: str, width: int = WIDTH) -> str:
    """`text` cut to `width` columns, its middle elided: a long path keeps its start and its file name."""
    if len(text) <= width:
        return text
    keep = width - 3
    return text[: keep // 2] + "..." + text[len(text) - (keep - keep // 2):]


def keep_end(text: str, width: int) -> str:
    """`text` in at most `width` columns, cut at its start: a file target's end names its file and function."""
    return text if len(text) <= width else "..." + text[len(text) - width + 3:]


def wrap(text: str, indent: str = "", more: str = "    ") -> list[str]:
    """Every line of `text` wrapped to WIDTH columns (a long word, such as a path, is broken too)."""
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        lines += textwrap.wrap(line, WIDTH, initial_indent=indent, subsequent_indent=indent + more,
                               break_long_words=True, break_on_hyphens=False) or [indent]
    return [line.rstrip() for line in lines]


def progress_line(row: str, cell: CellResult, device: str, dtype: str) -> str:
    """One cell as it finishes: verdict, where, examples, worst err/tol and ulps, seconds. Where the line would
    be too wide, the contract's label gives way first (its mode and parameters, then its name: the summary's
    headings have it whole), then the ulps (the err/tol stays: it is the verdict's number; the summary has the
    worst ulp), so the implementation, device, dtype and check show whole wherever they fit; a long
    implementation name keeps its end, where a file target names its function."""
    status = "ok  " if cell.ok else "FAIL"
    labels = (cell.contract, cell.contract.split(" (", 1)[0], None)
    rests = [" | ".join(part for part in (label, f"{device} {dtype}", row) if part is not None) for label in labels]
    # what gives way is decided as for the widest dtype name and a tail of TAIL_ROOM: a target's lines keep one
    # label, and show their ulps or not, in every dtype, whatever their numbers
    widest = len(max(DTYPE_NAMES, key=len)) - len(dtype) if dtype in DTYPE_NAMES else 0
    # a cell that ran no example (it timed out, or its worker died at once) has no error to show: not a perfect 0
    worst = f"{cell.worst:.3g}" if cell.examples else "-"
    ulps = (f"{cell.worst_ulps:.3g}" if cell.examples else "-") + " ulp"
    tail = f"  {cell.examples} ex, {worst}, {ulps}, {cell.seconds:.1f} s"
    label_room = WIDTH - TAIL_ROOM - 7
    rest = next((rest for rest in rests if len(cell.subject) + 3 + len(rest) + widest <= label_room), None)
    if rest is None:
        rest = rests[-1]
        tail = f"  {cell.examples} ex, {worst}, {cell.seconds:.1f} s"
    room = WIDTH - len(tail) - 7
    subject_room = room - 3 - len(rest)
    subject = cell.subject
    if len(subject) > subject_room >= SUBJECT_TAIL:  # its end names the function: "...loss.py:agg_loss"
        subject = keep_end(subject, subject_room)
    return f"  {status} {fit(f'{subject} | {rest}', room)}{tail}"


@dataclass
class _Line:
    """One implementation and contract, over all its cells."""

    implementation: str
    contract: str
    cells: list[CellResult] = field(default_factory=list)

    @property
    def applicable(self) -> list[CellResult]:
        return [cell for cell in self.cells if cell.applicable]

    def text(self, name_width: int) -> str:
        cells = self.applicable
        failing = [cell for cell in cells if not cell.ok]
        verdict = "ok" if not failing else "FAIL"
        counted = f"{len(failing)}/{len(cells)}" if failing else f"{len(cells)}"  # failing/checked, or checked
        conforming = [cell for cell in cells if cell.ok]
        worst = f"{max(cell.worst for cell in conforming):.3g}" if conforming else "-"
        ulps = f"{max(cell.worst_ulps for cell in conforming):.3g}" if conforming else "-"
        # a long name keeps its end (the title has it whole)
        return (f"  {keep_end(self.implementation, name_width):<{name_width}}  {verdict:<7} {counted:>5}  {worst:>7}  "
                f"{ulps:>9}  {self.deterministic}")

    @property
    def deterministic(self) -> str:
        """"yes", "no ~", or "-" where no cell was called twice (a row over micro-batches or ranks, a failing cell)."""
        checked = [cell.deterministic for cell in self.applicable if cell.deterministic is not None]
        return "-" if not checked else "yes" if all(checked) else "no ~"


def summary(results: Sequence[CellResult]) -> list[str]:
    """For each contract (its mode and parameters) a heading, then one line per implementation: verdict, cells,
    worst err/tol and ulps of the conforming cells, determinism."""
    lines: dict[tuple[str, str], _Line] = {}
    for cell in results:
        lines.setdefault((cell.contract, cell.subject), _Line(cell.subject, cell.contract)).cells.append(cell)
    name_width = min(max([len("implementation"), *(len(line.implementation) for line in lines.values())]),
                     WIDTH - COLUMNS)
    header = (f"  {'implementation':<{name_width}}  {'verdict':<7} {'cells':>5}  {'err/tol':>7}  {'worst ulp':>9}  "
              "deterministic")
    body: list[str] = []
    for contract in dict.fromkeys(key[0] for key in lines):
        body += [*wrap(f"{contract}:"), *(line.text(name_width) for key, line in lines.items() if key[0] == contract)]
    cells = [cell for cell in results if cell.applicable]
    failing = sum(not cell.ok for cell in cells)
    key = distinct_bugs(cells)
    distinct = len({key(c, bug) for c in cells for bug in c.bugs})
    caseless = sum(bool(c.problems) for c in cells)
    verdict = ("every cell conforms" if not failing else
               f"{failing} of {len(cells)} cells fail: {distinct} distinct bug{'s' * (distinct != 1)}"
               + (f", and {caseless} cell{'s' * (caseless != 1)} failed without a case" if caseless else ""))
    skipped = len(results) - len(cells)
    unchecked = any(line.deterministic == "-" for line in lines.values())
    notes = [f"{len(cells)} cell{'s' * (len(cells) != 1)} checked: {verdict}."
             + (f" {skipped} more {'are' if skipped != 1 else 'is'} not applicable (a gradient check without "
                "autograd, or a dtype the implementation lacks): n/a in the matrix." if skipped else ""),
             ("cells: failing/checked where one fails; " if failing else "")
             + "err/tol: worst error over tolerance of the conforming cells (<= 1 conforms); worst ulp: in units in "
             "the last place of the input dtype; deterministic: two calls on the same inputs gave the same bits "
             "(~: not, which is no failure"
             + ("; -: not checked, where no cell was called twice" if unchecked else "")
             + "). The whole matrix: --matrix, --json, --html."]
    return [header, "-" * len(header), *body, *(wrapped for note in notes for wrapped in wrap(note))]


def snippet_file(snippet: str, folder: str | None) -> str:
    """A file holding `snippet`, named by its content: the same failure found again (a rerun, same seed) replaces
    its file instead of adding one. In `folder`, or in this user's own folder under the system's temporary one (a
    check writes nothing where it runs unless asked)."""
    name = f"snippet-{hashlib.sha256(snippet.encode()).hexdigest()[:16]}.py"
    if folder is not None:
        write_atomically(os.path.join(folder, name), snippet)
        return os.path.join(folder, name)
    user = os.getuid() if hasattr(os, "getuid") else None
    own = os.path.join(tempfile.gettempdir(), f"lossnorm-snippets-{user if user is not None else 'user'}")
    try:
        os.makedirs(own, mode=0o700, exist_ok=True)
        found = os.lstat(own)  # the folder itself, never where a link of that name points
        if not stat.S_ISDIR(found.st_mode) or (user is not None and found.st_uid != user):
            raise PermissionError(f"{own} is not a folder of this user's")
        write_atomically(os.path.join(own, name), snippet)
        return os.path.join(own, name)
    except OSError:  # that folder is not this user's (or a link), or cannot be made: a new file in the temporary one
        handle, path = tempfile.mkstemp(prefix="snippet-", suffix=".py")
        with os.fdopen(handle, "w") as file:
            file.write(snippet)
        return path


def _snippet_lines(bug: Bug, folder: str | None) -> list[str]:
    """The snippet itself where it fits the terminal, else the file holding it (snippet_file) and its path."""
    lines = bug.snippet.splitlines()
    if len(lines) <= SNIPPET_LINES and all(len(line) <= WIDTH for line in lines):
        return ["  reproduce with this snippet:", "", *lines]
    path = snippet_file(bug.snippet, folder)
    size = f"{len(lines)} lines, {len(bug.snippet) // 1024 + 1} KB"
    wide = sum(len(line) > WIDTH for line in lines)
    why = (f"more than the {SNIPPET_LINES} lines printed here" if len(lines) > SNIPPET_LINES else
           f"{wide} line{'s' * (wide != 1)} wider than the {WIDTH} columns printed here")
    return wrap(f"reproduce with the snippet written to {path} ({size}: {why}); run it with python", indent="  ")


def _traceback(bug: Bug) -> list[str]:
    """A compiler's output fills the traceback too: its first and last lines (the JSON keeps it whole)."""
    assert bug.traceback is not None
    text = shorten(bug.traceback, head=12, tail=8) if any(map(is_compile_failure, bug.failures)) else bug.traceback
    return ["  traceback:", *wrap(text, indent="    ")]


def bugs(results: Sequence[CellResult], snippet_folder: str | None = None) -> list[str]:
    """Every distinct bug (`bug_keys`) of every failing cell: the first cell it shows in with its minimal case, its
    traceback and snippet; every other cell where it shows, its first failure under it (one bug of a JAX check can
    show in 16 cells, one of a rank form in every R x G split; the JSON keeps every cell's case and snippet)."""
    lines: list[str] = []
    key = distinct_bugs(results)
    found: dict[BugKey, list[tuple[CellResult, Bug]]] = {}  # each distinct bug's cells, in order
    for cell in results:
        for bug in cell.bugs:
            found.setdefault(key(cell, bug), []).append((cell, bug))
    for cell in results:
        where = f"{cell.subject} | {cell.contract} | {cell.device} {cell.dtype} | {cell.check}"
        for problem in cell.problems:
            lines += ["", *wrap(f"=== FAIL {where}: {for_terminal(problem)}")]
        for bug in cell.bugs:
            (_, first), *elsewhere = one_per_cell(found[key(cell, bug)], lambda occurrence: id(occurrence[0]))
            if first is not bug:
                continue
            # the cell's bugs of other kinds: each has a block of its own, or a line under an earlier cell's
            others = [other.kind for other in cell.bugs if key(cell, other) != key(cell, bug)]
            title = f"{where}: {bug.kind}" + (f" (this cell also: {'; '.join(others)})" if others else "")
            story = ", ".join(f"{label}={value!r}" for label, value in bug.story if label != "seed")
            # the closing === keeps its last word: a non-breaking space, which textwrap does not split at
            lines += ["", *(line.replace("\xa0", " ") for line in wrap(f"=== FAIL {title}\xa0==="))]
            lines += [line for failure in bug.failures for line in wrap(f"- {for_terminal(failure)}", indent="  ")]
            if story:
                lines += wrap(f"{case_title(label for label, _ in bug.story)}: {story}", indent="  ")
            if bug.traceback:
                lines += _traceback(bug)
            lines += _snippet_lines(bug, snippet_folder)
            lines += _elsewhere(bug.kind, elsewhere)
    return lines


def distinct_bugs(results: Sequence[CellResult]) -> Callable[[CellResult, Bug], BugKey]:
    """A cell's bug as one distinct bug of these results (fuzz/report/results.py, `bug_keys`)."""
    keys = bug_keys((cell.subject, cell.contract, cell.check, bug.kind) for cell in results for bug in cell.bugs)
    return lambda cell, bug: keys(cell.subject, cell.contract, cell.check, bug.kind)


def _elsewhere(kind: str, found: Sequence[tuple[CellResult, Bug]]) -> list[str]:
    """The other cells where a bug shows, under its block."""
    if not found:
        return []
    return ["", *wrap(f"  the same bug in {len(found)} more cell{'s' * (len(found) != 1)} (each one's minimal case "
                      "and snippet: --json, or the API's Report.failures):"),
            *other_cells(kind, [(cell.device, cell.dtype, cell.check, bug.failures[0] if bug.failures else "")
                                for cell, bug in found])]


# Numbers in a failure's first line (values, tolerances, a chunk's rows): what differs from cell to cell of one bug;
# never the digits of a name (float16, R2xG1), which tell two wordings apart.
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|\bnan\b|\binf\b")


def other_cells(kind: str, cells: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """(device, dtype, check, first failure) of the other cells of one bug: an item for each split and pass and
    each wording of the failure, its numbers aside, naming its cells and the first one's failure line whole (the
    engine is the block's own, and a rank form's explanation of its factor differs from split to split), so one
    bug in four dtypes and five splits is five items, not twenty. Where the cells' numbers differ, the item
    says whose it shows."""
    groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for device, dtype, check, failure in cells:
        # a message that starts with its kind ("raised TypeError: ...") is shown without it
        message = for_terminal(failure).split("\n", 1)[0].removeprefix(f"{kind}: ")
        groups.setdefault((split_and_pass(check), _NUMBER.sub("#", message)), []).append((device, dtype, message))
    lines = []
    for (split, _), members in groups.items():
        where = ", ".join(f"{device} {dtype}" for device, dtype, _ in members)
        device, dtype, message = members[0]
        # numbers differ from cell to cell (a float64 cell's err/tol may be 1e10 where float32's is 1.3): say whose
        whose = f" (the numbers of {device} {dtype})" if len({member[2] for member in members}) > 1 else ""
        lines += wrap(f"- {split} in {where}{whose}: {message}".rstrip(), indent="  ")
    return lines


def joined(lines: Iterable[str]) -> str:
    return "\n".join(lines)
