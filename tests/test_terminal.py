"""What the terminal shows: every line of the campaign and of `check` within 100 columns, by default; a failing
check's snippet printed whole where it fits, and written to a file (its path printed, and why) where not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from fuzz.report.results import Bug, CellResult
from fuzz.report.terminal import SNIPPET_LINES, WIDTH, bugs, progress_line, snippet_file, summary
from reference.case import Case

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fuzz", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def test_a_failing_check_fits_100_columns_and_prints_its_snippet():
    target = "tests/corpus/reductions/numpy_nan_on_all_masked_batch.py:loss_normalization"
    result = _run("check", target, "--framework", "numpy", "--reduction", "token-mean", "--dtypes", "float32")
    assert result.returncode == 1, result.stdout + result.stderr
    assert _too_wide(result.stdout) == [] and _too_wide(result.stderr) == []
    assert "reproduce with this snippet:" in result.stdout and "def " not in result.stderr
    snippet = result.stdout.split("reproduce with this snippet:", 1)[1]
    compile(snippet.split("\n=== ", 1)[0], "snippet", "exec")  # printed whole: it parses


def test_the_campaign_fits_100_columns():
    result = _run("--implementations", "numpy,torch-eager", "--dtypes", "bfloat16", "--max-examples", "2",
                  "--no-gradients")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _too_wide(result.stdout) == [] and _too_wide(result.stderr) == []
    headings = re.findall(r"^(magnitude|reduction|accumulation)\b.*:$", result.stdout, re.MULTILINE)
    assert set(headings) == {"magnitude", "reduction", "accumulation"}, result.stdout


def _cell(snippet: str, subject: str = "x" * 150) -> CellResult:
    case = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool), dtype="float32",
                story=(("batch", 1), ("note", "z" * 200)))
    bug = Bug("out of tolerance", ["y" * 300], case, snippet)
    cell = CellResult(subject, "cpu", "float32", "forward", bugs=[bug])
    cell.contract = "reduction (" + "w" * 150 + ")"
    return cell


def test_long_names_and_messages_are_wrapped_or_elided():
    cell = _cell("print('fits')\n")
    lines = summary([cell]) + bugs([cell])
    assert [line for line in lines if len(line) > WIDTH] == []
    assert "print('fits')" in lines  # a snippet that fits is printed whole


def _progress(subject: str, contract: str, dtype: str, row: str) -> str:
    cell = CellResult(subject, "cpu", dtype, row, examples=20, seconds=4.9)
    cell.contract, cell.worst, cell.worst_ulps = contract, 0.0624, 0.333
    return progress_line(row, cell, "cpu", dtype)


def test_a_progress_line_gives_up_the_contract_label_before_where_the_cell_ran():
    lines = {
        "plain": _progress("numpy", "magnitude", "float32", "forward"),
        "mode": _progress("torch-triton", "reduction (every mode)", "bfloat16", "gradients"),
        "split": _progress("jax-jit", "accumulation (every mode)", "bfloat16", "micro-batches R4xG1 gradients"),
        "ranks": _progress("torch-ddp", "accumulation (every mode)", "float16", "DDP ranks R2xG2 gradients"),
        "long name": _progress("z" * 150, "magnitude", "float64", "forward"),
        "rank built-in": _progress("jax-accumulation", "accumulation (every mode)", "bfloat16",
                                   "shard_map ranks R1xG2 gradients"),
    }
    assert all(len(line) <= WIDTH for line in lines.values()), lines
    assert "| magnitude | cpu float32 | forward  20 ex, 0.0624, 0.333 ulp, 4.9 s" in lines["plain"]
    assert "torch-triton | reduction | cpu bfloat16 | gradients  20 ex" in lines["mode"]
    assert "jax-jit | cpu bfloat16 | micro-batches R4xG1 gradients  20 ex" in lines["split"]
    assert "torch-ddp | cpu float16 | DDP ranks R2xG2 gradients  20 ex" in lines["ranks"]
    assert "..." in lines["long name"] and "| cpu float64 | forward  20 ex" in lines["long name"]
    # the longest rows of the built-ins: the ulps give way before the name
    assert lines["rank built-in"].endswith(
        " jax-accumulation | cpu bfloat16 | shard_map ranks R1xG2 gradients  20 ex, 0.0624, 4.9 s"), lines
    # a failing rank cell's long numbers leave its name little room: the name's end gives way, never the dtype
    cell = CellResult("/tmp/trial-user/ddp_loss.py:step", "cpu", "float32", "DDP ranks R2xG1 gradients",
                      examples=2, bugs=[Bug("k", ["k"], Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool),
                                                             dtype="float32"), "")])
    cell.contract, cell.worst, cell.worst_ulps = "accumulation (token-mean)", 1.2e6, 4.79e6
    line = progress_line(cell.check, cell, "cpu", "float32")
    assert len(line) <= WIDTH, line
    assert "...rial-user/ddp_loss.py:step | cpu float32 | DDP ranks R2xG1 gradients  2 ex, 1.2e+06, " in line, line
    cell.examples, cell.worst, cell.worst_ulps = 0, 0.0, 0.0  # timed out in its first example: no error to show
    assert progress_line(cell.check, cell, "cpu", "float32").endswith("  0 ex, -, 0.0 s")
    cell.subject = "f.py:step"  # a line with room for every number shows them all
    assert progress_line(cell.check, cell, "cpu", "float32").endswith("  0 ex, -, - ulp, 0.0 s")


def test_a_kind_shown_again_is_one_line_under_its_first_cell_without_its_kind():
    """One bug of a JAX check can show in 16 cells: the first cell's block in full, then a line for each other cell
    where the same implementation shows the same kind in the same check; another implementation's is its own bug."""
    case = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool), dtype="float32")
    cells = []
    for subject in ("f", "g"):
        for device in ("cpu", "cpu:1"):
            for dtype in ("float32", "float64"):
                cell = CellResult(subject, device, dtype, "forward",
                                  bugs=[Bug("raised TypeError", [f"raised TypeError: boom in {dtype}"], case,
                                            "raise TypeError\n")])
                cell.contract = "reduction (token-mean)"
                cells.append(cell)
    lines = bugs(cells)
    text = "\n".join(lines)
    assert text.count("=== FAIL") == 2 and text.count("reproduce with this snippet") == 2
    assert text.count("the same bug in 3 more cells") == 2
    block = text[text.index("=== FAIL f |"):text.index("=== FAIL g |")]
    # an item per wording: the cells whose messages read alike share one
    assert _items(block) == ["  - forward in cpu float64, cpu:1 float64: boom in float64",
                             "  - forward in cpu:1 float32: boom in float32"]
    assert "raised TypeError: raised TypeError" not in text and not _too_wide(text)


def test_a_cell_with_several_bugs_names_its_others_wherever_they_are_shown():
    """A cell's second bug may be a line under an earlier cell's block: its own block says what else it showed."""
    case = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool), dtype="float32")
    nan = Bug("non-finite output", ["non-finite output: loss = nan"], case, "assert False\n")
    wrong = Bug("loss out of tolerance", ["loss out of tolerance: loss = 2.0"], case, "assert False\n")
    cells = [CellResult("f", "cpu", "float16", "forward", bugs=[wrong]),
             CellResult("f", "cpu", "float32", "forward", bugs=[nan, wrong])]
    lines = bugs(cells)
    text = " ".join(" ".join(lines).split())  # the title is wrapped at 100 columns
    assert "float32 | forward: non-finite output (this cell also: loss out of tolerance) ===" in text
    assert "  - forward in cpu float32: loss = 2.0" in lines and "of 2 in this cell" not in text


def _items(text: str) -> list[str]:
    """The items under a block's "the same bug in N more cells", each with its wrapped lines joined."""
    items: list[str] = []
    listed = False
    for line in text.splitlines():
        listed = listed or line.startswith("  the same bug in ")
        if listed and line.startswith("  - "):
            items.append(line)
        elif listed and line.startswith("      ") and items:
            items[-1] += " " + line.strip()
        elif line.startswith("==="):
            listed = False
    return items


def _failing(subject: str, check: str, kind: str) -> CellResult:
    case = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool), dtype="float32")
    cell = CellResult(subject, "cpu", "float32", check, bugs=[Bug(kind, [f"{kind}: in {check}"], case, "assert 0\n")])
    cell.contract = "accumulation (token-mean)"
    return cell


def test_one_bug_of_a_rank_form_is_one_block_over_its_splits_and_passes():
    """A rank form's cells are one per R x G split and pass: the same kind in all of them is one bug, shown once
    with a line per other cell naming its split; the same kind in process, or on another engine, is another bug."""
    raised = "raised TracerBoolConversionError"
    cells = [_failing("f", f"shard_map ranks {split}{suffix}", raised)
             for suffix in ("", " gradients") for split in ("R1xG2", "R2xG1", "R2xG2")]
    cells += [_failing("f", "micro-batches R1xG2", raised), _failing("f", "forward", raised),
              _failing("f", "gradients", raised)]
    text = "\n".join(bugs(cells))
    assert text.count("=== FAIL") == 3 and text.count("assert 0") == 3
    assert any("9 of 9 cells fail: 3 distinct bugs." in line for line in summary(cells))
    start = text.index("=== FAIL f")
    block = text[start:text.index("=== FAIL", start + 1)]
    assert "shard_map ranks R1xG2: raised TracerBoolConversionError ===" in " ".join(block.split())
    assert _items(block) == [
        f"  - {split} in cpu float32: in shard_map ranks {split}" for split in ("R2xG1", "R2xG2")] + [
        f"  - {split} gradients in cpu float32: in shard_map ranks {split} gradients"
        for split in ("R1xG2", "R2xG1", "R2xG2")]
    assert "  - gradients in cpu float32: in gradients" in text.splitlines()  # in process: forward and gradients


def test_the_other_cells_of_a_bug_are_one_item_per_split_and_wording():
    """Twenty cells of one rank-form bug (four dtypes, five splits) read as five items: the cells of one split whose
    failures differ only in their numbers share one, which names them all and whose numbers it shows; another
    wording is another item."""
    kind = "loss out of tolerance"
    cells = []
    for split in ("R1xG2", "R2xG1", "R2xG2", "R1xG4", "R4xG1"):
        for n, dtype in enumerate(("float16", "bfloat16", "float32", "float64")):
            cell = _failing("f", f"DDP ranks {split}", kind)
            cell.dtype, cell.bugs[0].failures = dtype, [f"{kind}: loss = {n}.5, expected 0.{n} (err/tol = 1e+0{n}): "
                                                        f"the combined loss is 2x with {split}"]
            cells.append(cell)
    cells[-1].bugs[0].failures = [f"{kind}: loss = nan, expected 0.5"]
    items = _items("\n".join(bugs(cells)))
    # their numbers differ: the item says whose it shows (a float64 cell's err/tol may be far above float32's)
    assert items[0] == ("  - R1xG2 in cpu bfloat16, cpu float32, cpu float64 (the numbers of cpu bfloat16): loss = "
                        "1.5, expected 0.1 (err/tol = 1e+01): the combined loss is 2x with R1xG2")
    assert len(items) == 6 and items[-1] == "  - R4xG1 in cpu float64: loss = nan, expected 0.5"
    # the digits of a name are words: two dtypes' structure failures are two items
    structure = [_failing("f", "forward", "wrong output structure") for _ in range(3)]
    seen = [("bfloat16", "float64"), ("float16", "float64"), ("float64", "float32")]
    for cell, (dtype, wrong) in zip(structure, seen):
        cell.dtype, cell.bugs[0].failures = dtype, [f"loss has dtype {wrong}, expected float32"]
    assert _items("\n".join(bugs(structure))) == [
        "  - forward in cpu float16: loss has dtype float64, expected float32",
        "  - forward in cpu float64: loss has dtype float32, expected float32"]


def test_a_wrong_loss_and_its_wrong_gradient_are_one_bug():
    """A wrong value is one kind of bug, forward or gradient: a wrong formula's gradient is that formula's. What only
    the backward raised stays a bug of its own."""
    cells = [_failing("f", "forward", "loss out of tolerance"), _failing("f", "gradients", "d x out of tolerance")]
    assert any("2 of 2 cells fail: 1 distinct bug." in line for line in summary(cells))
    text = "\n".join(bugs(cells))
    assert text.count("=== FAIL") == 1
    assert _items(text) == ["  - gradients in cpu float32: d x out of tolerance: in gradients"]
    cells.append(_failing("f", "gradients", "backward raised ValueError"))
    assert any("3 of 3 cells fail: 2 distinct bugs." in line for line in summary(cells))
    # two outputs wrong in the forward checks are two bugs, and which one a wrong gradient belongs to is unknown
    outputs = [_failing("f", "forward", "a out of tolerance"), _failing("f", "forward", "b out of tolerance"),
               _failing("f", "gradients", "d x out of tolerance")]
    assert any("3 of 3 cells fail: 3 distinct bugs." in line for line in summary(outputs))
    # a gradient cell that shows the one wrong output through two inputs is one more cell, listed once
    through_two = [_failing("f", "forward", "a out of tolerance"), _failing("f", "gradients", "d x out of tolerance")]
    through_two[1].bugs.append(Bug("d y out of tolerance", ["d y out of tolerance"], through_two[1].bugs[0].case, ""))
    text = " ".join(" ".join(bugs(through_two)).split())
    assert "the same bug in 1 more cell " in text and text.count("- gradients in cpu float32") == 1, text
    assert any("2 of 2 cells fail: 1 distinct bug." in line for line in summary(through_two))
    # nor does one cell's second wrong output read as "the same bug in 1 more cell"
    both = _failing("f", "forward", "a out of tolerance")
    both.bugs.append(Bug("b out of tolerance", ["b out of tolerance: in forward"], both.bugs[0].case, "assert 0\n"))
    text = " ".join(" ".join(bugs([both])).split())
    assert text.count("=== FAIL") == 2 and "more cell" not in text and "(this cell also: b out of tolerance)" in text


def test_the_progress_lines_of_one_target_keep_one_label_in_every_dtype():
    """Which part of the contract's label fits is decided for the widest dtype name: a target whose float32 line
    would keep "reduction" and whose bfloat16 line would not keeps the same label in both."""
    lines = [_progress("/tmp/dddddddd/loss.py:fn", "reduction (token-mean)", dtype, "forward")
             for dtype in ("float16", "bfloat16", "float32", "float64")]
    assert all(len(line) <= WIDTH for line in lines), lines
    assert len({"| reduction |" in line for line in lines}) == 1, lines
    assert all("loss.py:fn | " in line for line in lines), lines


def test_the_progress_lines_of_one_implementation_keep_one_label_whatever_their_numbers():
    """A campaign's float64 line with short numbers (0.0316, 2 ulp) and its float32 line with longer ones (0.118,
    2.47 ulp) show the same label: the tail is taken as wide as numbers usually come."""
    labels = set()
    for dtype, worst, ulps in [("float32", 0.118, 2.47), ("float64", 0.0316, 2.0), ("float16", 0.0136, 5.37e-05)]:
        cell = CellResult("torch-eager", "cpu", dtype, "forward", examples=43, seconds=0.4)
        cell.contract, cell.worst, cell.worst_ulps = "reduction (every mode)", worst, ulps
        line = progress_line("forward", cell, "cpu", dtype)
        assert len(line) <= WIDTH, line
        labels.add(line.split(" | ")[1])
    assert len(labels) == 1, labels
    # at ten times the budget, a user's file target: numbers from 0.5 ulp to 1.23e+03 ulp, one label
    lines = []
    for dtype, worst, ulps in [("float32", 0.118, 0.5), ("float16", 7.73e-05, 1234.0), ("bfloat16", 0.2, 2.0)]:
        cell = CellResult("myloss.py:tm_loss1", "cpu", dtype, "forward", examples=403, seconds=12.3)
        cell.contract, cell.worst, cell.worst_ulps = "reduction (token-mean)", worst, ulps
        lines.append(progress_line("forward", cell, "cpu", dtype))
    assert all(len(line) <= WIDTH for line in lines), lines
    assert len({"| reduction |" in line for line in lines}) == 1, lines


def test_a_bugs_heading_never_ends_on_a_line_of_its_own_closing_marks():
    """However long the heading, its closing `===` stays with the heading's last word."""
    for length in range(20, 120):
        cell = _cell("print('fits')\n", subject="s" * length)
        cell.contract = "magnitude"
        report = bugs([cell])
        assert [line for line in report if line.startswith("=== FAIL")], length
        assert not [line for line in report if line.strip() == "==="], length


def test_a_snippet_of_large_inputs_goes_to_a_file(tmp_path):
    snippet = "x = [" + ", ".join(["0.1"] * 40000) + "]\nassert False\n"
    lines = bugs([_cell(snippet)], snippet_folder=str(tmp_path))
    assert [line for line in lines if len(line) > WIDTH] == []
    assert sum(map(len, lines)) < 5000
    written = list(tmp_path.glob("snippet-*.py"))
    assert len(written) == 1 and written[0].read_text() == snippet
    assert any(str(written[0])[:40] in line for line in lines)
    assert any(line.startswith("  minimal case:") for line in lines) and any("- y" in line for line in lines)


def test_a_snippet_found_again_replaces_its_file(tmp_path, monkeypatch):
    """Snippet files are named by their content, in this user's folder under the temporary one by default: a rerun
    that finds the same failure writes no second file, and another failure gets a file of its own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    snippet = "x = [" + ", ".join(["0.1"] * 40000) + "]\nassert False\n"
    first, again = (snippet_file(snippet, None) for _ in range(2))
    other = snippet_file(snippet + "# another\n", None)
    assert first == again and other != first and Path(first).parent == Path(other).parent
    assert Path(first).parent.parent == tmp_path and Path(first).read_text() == snippet
    assert sorted(path.name for path in Path(first).parent.iterdir()) == sorted([Path(first).name, Path(other).name])
    assert Path(first).name in "".join(line.strip() for line in bugs([_cell(snippet)]))


def test_a_snippet_sent_to_a_file_says_why(tmp_path):
    """A short snippet with one wide line (a long path) is not "too large": the message names what kept it out."""
    wide = "x = 1\n# " + "w" * WIDTH + "\n"
    text = " ".join(" ".join(bugs([_cell(wide)], snippet_folder=str(tmp_path))).split())  # its lines rejoined
    assert f"1 line wider than the {WIDTH} columns printed here" in text and "too large" not in text
    long = "x = 1\n" * (SNIPPET_LINES + 1)
    text = " ".join(" ".join(bugs([_cell(long)], snippet_folder=str(tmp_path))).split())
    assert f"more than the {SNIPPET_LINES} lines printed here" in text


def test_the_summary_counts_the_cells_that_do_not_apply():
    checked = CellResult("f", "cpu", "float32", "forward", examples=20)
    skipped = CellResult("f", "cpu", "float32", "gradients", applicable=False)
    assert any("1 cell checked: every cell conforms. 1 more is not applicable" in line
               for line in summary([checked, skipped]))
    assert not any("not applicable" in line for line in summary([checked]))


def test_a_progress_line_keeps_the_end_of_a_long_target_where_its_function_is():
    line = _progress("examples/a_long_folder/verl_agg_loss.py:fixed_length_default", "reduction (fixed-length)",
                     "float32", "forward")
    assert len(line) <= WIDTH and line.startswith("  ok   ...")
    assert "agg_loss.py:fixed_length_default | cpu float32 | forward  20 ex" in line


def test_the_summary_counts_distinct_bugs_as_the_html_report_does():
    """The same kind of failure in two dtypes' cells is one distinct bug, not two unrelated bugs; a cell that
    failed without a case (a worker died) is counted apart."""
    cells = [_cell("print('fits')\n") for _ in range(2)]
    assert any("2 of 2 cells fail: 1 distinct bug." in line for line in summary(cells))
    assert any(line.split()[1:3] == ["FAIL", "2/2"] for line in summary(cells))  # failing/checked
    died = CellResult("f", "cpu", "float32", "forward", problems=["the worker died"])
    assert any("3 of 3 cells fail: 1 distinct bug, and 1 cell failed without a case." in line
               for line in summary([*cells, died]))


def test_a_long_name_in_the_summary_keeps_its_file_and_function():
    cell = CellResult("tests/corpus/reductions/numpy_nan_on_all_masked_batch.py:loss_normalization", "cpu",
                      "float32", "forward", examples=20)
    row = next(line for line in summary([cell]) if " ok " in line)
    assert row.split()[0] == "...n_on_all_masked_batch.py:loss_normalization" and len(row) <= WIDTH


def test_a_link_in_place_of_the_snippet_folder_is_not_followed(tmp_path, monkeypatch):
    """Another user may make a link named as this user's snippet folder: the file goes elsewhere, never through it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"lossnorm-snippets-{os.getuid()}").symlink_to(elsewhere)
    path = snippet_file("assert False\n", None)
    assert list(elsewhere.iterdir()) == [] and Path(path).read_text() == "assert False\n"


def test_the_matrix_says_a_cell_a_fail_fast_run_never_reached_was_not_run():
    """--fail-fast stops at the first failing cell: the others of its row are "not run", never "n/a" (which says the
    cell does not apply), and the legend says why; a run that reached every cell has no such word."""
    from fuzz.report.html import _cell_html, _heat_legend, _some_not_run
    from fuzz.report.matrix import render_matrix

    failing = _cell("assert False\n", subject="f")
    failing.contract = "reduction (token-mean)"
    lacking = CellResult("f", "cpu", "float16", "forward", applicable=False)
    lacking.contract = failing.contract
    matrix = render_matrix([failing, lacking], ["float16", "bfloat16", "float32"], {})
    row = matrix.splitlines()[2]  # float16 lacking, bfloat16 never reached, float32 failing
    assert re.search(r" n/a +not run +FAIL ", row) and row.count("not run") == 1, matrix
    assert "not run: the run stopped at its first failing cell (--fail-fast)" in matrix
    assert "not run" not in render_matrix([failing], ["float32"], {})
    assert ">not run</td>" in _cell_html(None, None, "f · cpu · float32")
    rows = [failing.as_json(), {**failing.as_json(), "dtype": "float64", "check": "gradients"}]
    assert _some_not_run(rows) and "the run stopped" in _heat_legend(True) and "not run" not in _heat_legend(False)


def test_the_summary_says_what_a_dash_in_deterministic_means_where_one_shows():
    called_twice = CellResult("f", "cpu", "float32", "forward", examples=3)
    called_twice.contract, called_twice.deterministic = "reduction (token-mean)", True
    over_chunks = CellResult("g", "cpu", "float32", "micro-batches 2x1", examples=3)  # no second call there
    over_chunks.contract = "accumulation (token-mean)"
    both = " ".join(" ".join(summary([called_twice, over_chunks])).split())
    assert "-: not checked, where no cell was called twice" in both
    assert "not checked" not in " ".join(summary([called_twice]))
