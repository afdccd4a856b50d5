"""The HTML report and the gradient-weight figure: escaping, the matrix's cells, the embedded data, no external
resource, atomic writes; then the page in a real browser (headless Chromium): a screenshot, the DOM after the
script ran, no console message, and a click on a cell showing its details."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fuzz.report.files
from fuzz.report.data import report_data
from fuzz.report.files import write_json
from fuzz.report.html import bug_groups, embedded_data, heat_colour, render_html, write_html
from fuzz.report.results import Bug, CellResult
from fuzz.report.weights import gradient_weights_svg, main, mode_weights
from reference.case import Case
from reference.reduction import MODES, SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN

# What a snippet may hold: markup that must stay text, a script end that must not end the data block.
ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "</script><script>alert(1)</script> <b>bold</b> & 'quotes' \"double\" \u2028 <!-- x -->"
SNIPPET = f"import torch\n# {HOSTILE}\nprint('reproduced')\n"


# ------------------------------------------------------------------------------------------- report data

def _bug(kind: str, snippet: str) -> Bug:
    case = Case([[-1.0, -2.0]], [1.0], [[True, False]], story=(("dtype", "float32"), ("note", "<b>x</b>")))
    return Bug(kind, [f"{kind}: token_averaged[0] = nan <i>here</i>"], case, snippet, traceback=f"Traceback\n{HOSTILE}")


def _cells() -> list[CellResult]:
    """Real CellResults (the shape write_json writes): ok cells, one not deterministic, an n/a cell, a FAIL cell
    with two bugs and an infinite ulp count, and a dtype missing from one row (not run: --fail-fast stopped first)."""
    layouts = ("contiguous", "transposed")
    return [
        CellResult("numpy", "cpu", "float32", "forward", examples=10, worst=0.31, worst_ulps=0.8, deterministic=True,
                   seconds=1.5, layouts=layouts),
        CellResult("numpy", "cpu", "bfloat16", "forward", examples=10, worst=0.92, worst_ulps=0.4,
                   deterministic=False, seconds=1.2, layouts=layouts),
        CellResult("numpy", "cpu", "float32", "gradients", applicable=False),
        CellResult("numpy", "cpu", "bfloat16", "gradients", applicable=False),
        CellResult("<b>user</b>.py:fn", "cpu", "float32", "forward", examples=51, worst=1e6, worst_ulps=float("inf"),
                   deterministic=True, seconds=3.0, layouts=layouts, precision="contract",
                   bugs=[_bug("non-finite output", SNIPPET), _bug("token_averaged out of tolerance", "print(2)\n")]),
    ]


def _fuzz_data(tmp_path: Path) -> dict[str, Any]:
    """A report as the command line writes it (through write_json), plus figures, versions and a machine."""
    path = tmp_path / "run.json"
    write_json(str(path), report_data(_cells(), {"command": "check", "target": "<b>user</b>.py:fn", "seconds": 12.5,
                                                 "seed": 0, "contract": "magnitude", "masked_values": "any",
                                                 "framework": "torch"}))
    data = json.loads(path.read_text())
    return {**data, "versions": {"torch": "2.13.0", "numpy": "2.4.6"}, "machine": {"cpu": "x86_64", "cores": 16},
            "figures": {"gradient weights": gradient_weights_svg()}}


def _bench_data(contracts: tuple[tuple[str, str], ...] = (("magnitude", ""),)) -> dict[str, Any]:
    """Records as `python -m bench --json` writes them, for each (contract, its parameters' label)."""
    records = []
    for contract, parameters in contracts:
        for device in ("cpu",):
            for dtype in ("float32", "bfloat16"):
                for batch, tokens, floor in ((8, 512, 4.0), (256, 4096, 16.8)):
                    size = batch * tokens * 5
                    for name, gbps in (("floor", floor), ("numpy", floor / 10), ("torch-eager", floor / 40)):
                        records.append({"implementation": name, "contract": contract, "parameters": parameters,
                                        "device": device, "dtype": dtype, "batch": batch, "tokens": tokens,
                                        "median_s": size / gbps / 1e9, "bytes": size, "gbps": gbps,
                                        "floor_gbps": floor, "fraction_of_floor": gbps / floor})
    return {"kind": "bench", "records": records, "command": "python -m bench --quick"}


TWO_CONTRACTS = (("magnitude", ""), ("reduction", "token-mean"))


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside each <pre> (entities decoded)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.pre: list[str] = []
        self._in_pre = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "pre":
            self._in_pre, _ = True, self.pre.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_pre = self._in_pre and tag != "pre"

    def handle_data(self, data: str) -> None:
        if self._in_pre:
            self.pre[-1] += data


def _parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def _without_data(page: str) -> str:
    start = page.index('<script type="application/json"')
    return page[:start] + page[page.index("</script>", start):]


# ------------------------------------------------------------------------------------------- unit tests

def test_hostile_snippets_and_names_render_inert(tmp_path):
    page = render_html(_fuzz_data(tmp_path))
    for markup in ("<script>alert(1)</script>", "<b>bold</b>", "<b>user</b>", "<b>x</b>", "<i>here</i>", "<!-- x"):
        assert markup not in page
    assert page.count("<script") == 2  # the data block and the page's own script, nothing from the data
    tags = _parse(page)
    assert [t for t, _ in tags.tags].count("script") == 2 and "i" not in {t for t, _ in tags.tags}
    assert SNIPPET in tags.pre  # the snippet reads back exactly, as text, for the copy button
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_cells_show_fail_na_and_the_heat_scale(tmp_path):
    page = render_html(_fuzz_data(tmp_path))
    tags = _parse(page)
    cells = [attrs for tag, attrs in tags.tags if tag == "td" and "cell" in (attrs.get("class") or "")]
    kinds = [attrs["class"].split()[1] for attrs in cells]
    # rows: numpy forward (2 dtypes), numpy gradients (n/a x2), the user's forward (FAIL, and bfloat16 not run)
    assert kinds == ["pass", "pass", "na", "na", "na", "fail"]
    assert '<span class="big">FAIL</span><span class="small">2 bugs</span>' in page
    assert page.count(">n/a</td>") == 2 and page.count(">not run</td>") == 1
    assert "the run stopped at its first failing cell" in page
    assert f"background:{heat_colour(0.31)}" in page and heat_colour(0) != heat_colour(1)
    assert heat_colour(5.0) == heat_colour(1.0) and heat_colour(float("nan")) == heat_colour(1.0)
    assert "2 distinct bugs" in page and 'class="tilde"' in page  # the bfloat16 cell that varied


def test_every_bug_is_listed_with_its_case_and_a_copy_button(tmp_path):
    page = render_html(_fuzz_data(tmp_path))
    assert page.count('class="bug"') == 2 and page.count('class="copy"') == 2
    assert "non-finite output" in page and "token_averaged out of tolerance" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page  # the minimal case's values, escaped
    assert "<dt>version: torch</dt><dd>2.13.0</dd>" in page and "<dt>machine: cores</dt><dd>16</dd>" in page


def test_one_bug_of_a_rank_form_is_one_card_over_its_splits_and_passes():
    """The page groups bugs as the terminal does (fuzz/report/results.py, `bug_keys`): one kind of one implementation
    on one engine is one card, every cell (split, pass, dtype) it shows in listed on it; a wrong gradient is on the
    card of the one wrong output of its engine, titled by that output."""
    def cell(check: str, kind: str) -> dict[str, Any]:
        return {"implementation": "f", "contract": "accumulation (token-mean)", "device": "cpu", "dtype": "float32",
                "check": check, "bugs": [{"kind": kind, "failures": [kind]}]}

    cells = [cell(f"shard_map ranks {split}{suffix}", "raised ValueError")
             for split in ("R1xG2", "R2xG2") for suffix in ("", " gradients")]
    cells += [cell("shard_map ranks R1xG2 gradients", "d x out of tolerance"), cell("forward", "raised ValueError")]
    cells += [cell("shard_map ranks R2xG1", "loss out of tolerance")]  # the same wrong value, forward
    groups = bug_groups(cells)
    assert [(group.engine, group.kind, len(group.occurrences)) for group in groups] == [
        ("shard_map ranks", "raised ValueError", 4), ("shard_map ranks", "loss out of tolerance", 2),
        ("", "raised ValueError", 1)]
    page = render_html({"command": "check", "cells": cells, "ok": False})
    assert "Bugs (3 distinct)" in page and "cpu · shard_map ranks R2xG2 gradients · float32" in page


def test_the_embedded_json_round_trips_to_the_input(tmp_path):
    data = _fuzz_data(tmp_path)
    page = render_html(data)
    assert embedded_data(page) == data  # infinite ulps included
    block = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON a browser parses")

    json.loads(block, parse_constant=refuse)  # strict JSON: JSON.parse reads it
    assert "<" not in block and ">" not in block
    bench = _bench_data()
    assert embedded_data(render_html(bench)) == bench


@pytest.mark.parametrize("kind", ["fuzz", "bench"])
def test_the_page_references_no_external_resource(tmp_path, kind):
    page = render_html(_fuzz_data(tmp_path) if kind == "fuzz" else _bench_data())
    tags = _parse(page)
    assert "link" not in {tag for tag, _ in tags.tags}
    for tag, attrs in tags.tags:
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:")), (tag, name, value)
        if tag == "script":
            assert "src" not in attrs
        if tag == "img":
            assert (attrs.get("src") or "").startswith("data:image/svg+xml;base64,")
    assert "@import" not in page and "url(" not in page
    outside = _without_data(page)  # the data may quote anything; the markup names no URL at all
    assert "http://" not in outside and "https://" not in outside
    assert "default-src 'none'" in page


def test_the_bench_page_has_the_table_and_a_panel_per_device_and_dtype():
    data = _bench_data()
    page = render_html(data)
    tags = _parse(page)
    assert page.count("<tr") - page.count('<tr class="gap"') == len(data["records"]) + 1  # + the header
    assert page.count('<figure class="panel">') == 2  # cpu float32, cpu bfloat16
    assert page.count('data-series="floor"') == 2 and 'stroke-dasharray="7 5"' in page
    assert [t for t, _ in tags.tags].count("svg") == 3  # two panels and the header's icon
    assert "<th>contract</th>" in page and "<td>magnitude</td>" in page


def test_the_bench_page_groups_rows_and_panels_by_contract():
    data = _bench_data(TWO_CONTRACTS)
    page = render_html(data)
    assert page.count("<tr") - page.count('<tr class="gap"') == len(data["records"]) + 1
    # a gap between groups: 2 contracts x 2 dtypes x 2 sizes = 8 groups
    assert page.count('<tr class="gap"') == 7
    assert page.count('<figure class="panel">') == 4  # per contract, device and dtype
    assert page.count('data-series="floor"') == 4  # each contract's panel has its own floor
    assert "reduction (token-mean) · cpu · float32" in page and "magnitude · cpu · bfloat16" in page
    assert "Throughput of reduction (token-mean) on cpu, float32" in page
    table = page.split('id="bench-table"', 1)[1]
    rows = re.findall(r"<tr[^>]*><td>([^<]*)</td><td>([^<]*)</td>", table)
    contracts = [contract for contract, _ in rows]
    # each contract's rows together, the floor first in every group
    assert contracts == sorted(contracts) and set(contracts) == {"magnitude", "reduction (token-mean)"}
    assert rows[0][1] == "floor" and rows[len(rows) // 2][1] == "floor"
    assert "implementations of magnitude; reduction (token-mean)" in page


def test_bench_records_without_a_contract_still_render():
    data = _bench_data()
    for record in data["records"]:
        del record["contract"], record["parameters"]
    page = render_html(data)
    assert page.count('<figure class="panel">') == 2 and "<td>numpy</td>" in page
    assert "Throughput on cpu, float32" in page


def test_a_report_without_cells_or_records_is_refused():
    with pytest.raises(ValueError, match="cells"):
        render_html({"command": "campaign"})


def test_write_html_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "report.html"
    write_html(str(path), _bench_data())
    before, data = path.read_text(), _fuzz_data(tmp_path)
    assert embedded_data(before) == _bench_data()

    def broken(source: str, destination: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(fuzz.report.files.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_html(str(path), data)
    assert path.read_text() == before  # the old report is whole
    monkeypatch.undo()
    with pytest.raises(ValueError):  # a render that fails writes nothing at all
        write_html(str(tmp_path / "new.html"), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "run.json"]  # no temporary file left


def test_the_weights_figure_is_well_formed_with_one_series_per_mode(tmp_path):
    lengths = (5, 20, 80, 320)
    svg = gradient_weights_svg(lengths, width=512, l_max=512)
    root = ElementTree.fromstring(svg)
    namespace = "{http://www.w3.org/2000/svg}"
    series = [g for g in root.iter(f"{namespace}g") if g.get("class") == "series"]
    assert [g.get("data-series") for g in series] == list(MODES)
    for group in series:
        markers = [node for node in group if node.tag != f"{namespace}path"]
        assert len(markers) == len(lengths) and len(group.findall(f"{namespace}path")) == 1
    assert root.find(f"{namespace}title").text.startswith("How each loss reduction")
    assert "64×" in svg  # the book's point: 5 against 320 tokens per sequence


def test_the_weights_are_the_references():
    weights = mode_weights((5, 20, 80, 320), 512, 512.0)
    assert np.allclose(weights[SEQ_MEAN_TOKEN_MEAN], [1 / (4 * n) for n in (5, 20, 80, 320)])
    assert np.allclose(weights[TOKEN_MEAN], 1 / 425)
    with pytest.raises(ValueError, match="between 1 and the width"):
        gradient_weights_svg((0, 5))


def test_the_weights_command_writes_the_figure(tmp_path, capsys):
    out = tmp_path / "gradient-weights.svg"
    assert main(["--out", str(out), "--lengths", "3,30,300", "--width", "400"]) == 0
    assert ElementTree.parse(out).getroot().get("viewBox")
    assert str(out) in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- a real browser

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason=f"{CHROMIUM} not installed (Debian: apt-get install chromium)")


def _browser_tmp() -> str:
    """A folder for Chromium's own temporary files (a profile's lock socket, which it leaves behind in a folder of
    its own), removed after the run. Short, at the machine's temporary root: a socket's path must fit in 108
    bytes, which a pytest-xdist test's own folder does not leave room for."""
    return tempfile.mkdtemp(prefix="lossnorm-chromium-")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """One headless run with its own profile, so parallel tests never share one."""
    profile = tempfile.mkdtemp(dir=tmp_path, prefix="profile-")
    scratch = _browser_tmp()
    try:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                              timeout=120, check=False, env={**os.environ, "TMPDIR": scratch})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _console(stderr: str, url: str) -> list[str]:
    """The page's console lines (errors, uncaught exceptions, refused resources) in Chromium's log."""
    return [line for line in stderr.splitlines() if (":CONSOLE" in line or "Uncaught" in line) and url in line]


@needs_chromium
def test_chromium_renders_the_report(tmp_path, record_property):
    page = tmp_path / "report.html"
    write_html(str(page), _fuzz_data(tmp_path))
    url = page.as_uri()
    screenshot = tmp_path / "report.png"
    shot = _chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1400,2000", url)
    assert screenshot.exists() and screenshot.stat().st_size > 20_000, shot.stderr[-2000:]
    record_property("screenshot", str(screenshot))
    print(f"screenshot: {screenshot}")
    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", url)
    assert 'id="heatmap"' in dom.stdout and dom.stdout.count('class="cell fail') == 1
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout  # the snippet, as text
    assert "<dt>worst err/tol</dt><dd>1e+6</dd>" in dom.stdout  # the script ran: the FAIL cell's details
    assert _console(dom.stderr, url) == []


class DevTools:
    """The Chrome DevTools protocol over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON): a
    page to drive without a websocket library."""

    def __init__(self, profile: str) -> None:
        browser_in, self._to_browser = os.pipe()
        self._from_browser, browser_out = os.pipe()

        def arrange() -> None:  # in the child: the browser's ends moved onto the fds the protocol names
            moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (browser_in, browser_out)]  # clear of 3 and 4
            os.dup2(moved[0], 3)
            os.dup2(moved[1], 4)

        # pass_fds keeps 3 and 4 open through exec (subprocess closes the others after arrange() ran)
        self._scratch = _browser_tmp()
        self.process = subprocess.Popen([CHROMIUM, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                                         "about:blank"], pass_fds=(3, 4), preexec_fn=arrange,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, "TMPDIR": self._scratch})
        os.close(browser_in)
        os.close(browser_out)
        self._buffer, self._next, self.events = b"", 0, []
        self.session: str | None = None

    def call(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next:
                assert "error" not in reply, reply
                return reply["result"]
            self.events.append(reply)

    def _receive(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(self._from_browser, 1 << 16) if ready else b""
            assert chunk, "Chromium sent nothing in time"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while self.evaluate("document.readyState") != "complete":
            assert time.monotonic() < deadline, "the page never finished loading"
            time.sleep(0.05)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def problems(self) -> list[dict[str, Any]]:
        """Uncaught exceptions, console calls and browser log entries (a refused resource is one)."""
        kinds = {"Runtime.exceptionThrown", "Runtime.consoleAPICalled", "Log.entryAdded"}
        return [event for event in self.events if event.get("method") in kinds]

    def close(self) -> None:
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self.process.kill()
        self.process.wait(timeout=30)
        shutil.rmtree(self._scratch, ignore_errors=True)


@needs_chromium
def test_clicking_a_cell_in_chromium_shows_its_details(tmp_path):
    page = tmp_path / "report.html"
    write_html(str(page), _fuzz_data(tmp_path))
    browser = DevTools(tempfile.mkdtemp(dir=tmp_path, prefix="profile-"))
    try:
        browser.open(page.as_uri())
        heading = browser.evaluate("document.querySelector('#details h3').textContent").replace("\u200b", "")
        assert heading == "<b>user</b>.py:fn · cpu · float32 · forward"  # the first failing cell, as text
        browser.evaluate("document.querySelector('td.cell[data-cell=\"0\"]').click()")
        details = browser.evaluate("document.getElementById('details').innerText")
        assert "numpy · cpu · float32 · forward" in details.replace("\u200b", "")
        assert "0.31" in details and "contiguous, transposed" in details and "identical bits" in details
        assert browser.evaluate("document.querySelectorAll('td.cell.selected').length") == 1
        browser.evaluate("document.querySelector('button.copy').click()")
        time.sleep(0.2)  # the clipboard answers asynchronously
        assert browser.evaluate("document.querySelector('button.copy').textContent") in ("Copied", "Select and copy")
        # the tagged {"$float": "Infinity"} revived: the script sees the number the JSON report holds
        assert browser.evaluate("window.reportData.cells[4].worst_ulps === Infinity") is True
        assert browser.problems() == []
    finally:
        browser.close()


@needs_chromium
@pytest.mark.parametrize("command", [
    ["check", "tests/corpus/reductions/numpy_nan_on_all_masked_batch.py:loss_normalization", "--framework", "numpy",
     "--reduction", "token-mean", "--dtypes", "float32"],
    ["--implementations", "numpy", "--contracts", "reduction", "--dtypes", "float32", "--max-examples", "3",
     "--no-gradients"],
], ids=["check", "campaign"])
def test_the_commands_html_opens_in_chromium_with_the_heatmap(tmp_path, command, record_property):
    """What `check --html` and the campaign's `--html` write, end to end: the heatmap drawn, a failing check's
    snippet on the page, no console errors."""
    page = tmp_path / "report.html"
    result = subprocess.run([sys.executable, "-m", "fuzz", *command, "--html", str(page)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == (1 if command[0] == "check" else 0), result.stdout + result.stderr
    assert f"HTML report: {page}" in result.stdout
    screenshot = tmp_path / "report.png"
    shot = _chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1400,2000", page.as_uri())
    assert screenshot.exists() and screenshot.stat().st_size > 20_000, shot.stderr[-2000:]
    record_property("screenshot", str(screenshot))
    print(f"screenshot: {screenshot}")
    browser = DevTools(tempfile.mkdtemp(dir=tmp_path, prefix="profile-"))
    try:
        browser.open(page.as_uri())
        assert browser.evaluate("document.querySelectorAll('#heatmap td.cell').length") > 0
        snippets = browser.evaluate("[...document.querySelectorAll('pre')].map(p => p.textContent).join('\\n')")
        if command[0] == "check":
            assert "loss_normalization" in snippets and "# FAILED" in snippets
            assert browser.evaluate("document.querySelectorAll('td.cell.fail').length") >= 1
        assert browser.problems() == []
    finally:
        browser.close()


def test_the_json_holds_data_and_the_page_draws_the_reductions_figure(tmp_path):
    """A reduction check's JSON is its data only (no drawing in it); its HTML page draws the figure of
    per-token gradient weights, as a page made from that JSON does."""
    result = subprocess.run([sys.executable, "-m", "fuzz", "check",
                             "tests/corpus/reductions/numpy_nan_on_all_masked_batch.py:loss_normalization",
                             "--framework", "numpy", "--reduction", "token-mean", "--dtypes", "float32",
                             "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert "figures" not in data and "<svg" not in json.dumps(data)
    caption = "<figcaption>gradient weight per token against sequence length</figcaption>"
    assert caption in (tmp_path / "r.html").read_text() and caption in render_html(data)
