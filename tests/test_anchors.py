"""The fixed cases every gradient cell checks first: each is the case it names, in every contract, under every
engine's draws; a backward bug that only such a case shows is found at any seed, with no drawn example, in a
single-process cell and in an engine's; fixed cases run in order, every failing one is reported, and a time limit
in one still ends the cell."""

from __future__ import annotations

import unittest

import numpy as np
import pytest

import fuzz
from fuzz.engines.chunks import draw_chunks
from fuzz.engines.split import draw_split
from fuzz.judge.anchors import (
    FORWARD_FIXED_CASES,
    GRADIENT_FIXED_CASES,
    LONG_ROWS,
    MANY_ROWS,
    MIXED_COUNTS,
    NOTHING_SELECTED,
    SPLIT_FORWARD_FIXED_CASES,
    SPLIT_GRADIENT_FIXED_CASES,
    WIDE_HALF_BATCH,
    AnchorDraws,
    fixed_cases,
)
from fuzz.judge.draws import draw_case, draw_cotangents, drawer
from fuzz.judge.subject import Subject
from fuzz.judge.verdict import Verdict
from fuzz.report.terminal import bugs
from fuzz.run.calls import CallTimedOut
from fuzz.run.cell import fuzz_cell
from impls.frameworks import load_framework
from impls.numpy_impl import BFLOAT16
from reference.contract import ALTERNATIVES
from reference.contracts import CONTRACT_NAMES, get_contract
from reference.dtypes import DTYPE_NAMES


@pytest.mark.parametrize("contract_name", CONTRACT_NAMES)
@pytest.mark.parametrize("emphasis", ["any", "splits"])
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_each_fixed_case_is_the_case_it_names_and_every_draw_has_an_answer(contract_name, emphasis, dtype):
    contract = get_contract(contract_name)
    for anchor in (MIXED_COUNTS, NOTHING_SELECTED, LONG_ROWS, MANY_ROWS, WIDE_HALF_BATCH):
        data = AnchorDraws(anchor, contract)
        case = draw_case(drawer(data), dtypes=[dtype], layouts=["contiguous", "transposed"], contract=contract,
                         emphasis=emphasis)
        counts = case.mask.sum(axis=1)
        assert case.layout == "contiguous" and case.dtype == dtype
        if anchor is MIXED_COUNTS:  # every row a different count, from none to all of them
            assert case.shape == (4, 7) and sorted(counts) == [0, 2, 5, 7], counts
        elif anchor is NOTHING_SELECTED:
            assert case.shape == (4, 7) and not case.mask.any()
        elif anchor is WIDE_HALF_BATCH:  # B n_i, and N, past float16's largest, 65504
            assert case.shape == (64, 1031) and case.mask.all() and 64 * 1031 > 65504
        else:  # past bfloat16's 256 in a row and float16's 2048 in the batch, or 4096 rows: every token selected,
            # values of one sign
            assert case.shape == ((3, 1031) if anchor is LONG_ROWS else (4096, 1)) and case.mask.all()
            one_sign = [name for name, menu in contract.domain.menus.items() if menu.one_sign is not None]
            assert one_sign  # every contract names a token input's kind of one sign
            for name in one_sign:
                values = case.values[name]
                assert np.all(values <= 0) or np.all(values >= 0), name
                assert np.count_nonzero(values) > 3000, name
        cotangents = draw_cotangents(data, case, emphasis)
        assert any(np.any(value != 0) for value in cotangents.values())  # the fullest kind
        assert all(np.isfinite(value).all() for value in case.values.values() if value.dtype != bool)
        # the engines' own draws: a split over a 2 x 1 mesh, chunks over 2 ranks x 2 steps
        _, split = draw_split(drawer(data), case, ((2, 1),))
        assert split.row_cuts == (0, round(case.shape[0] / 2), case.shape[0])  # even, rounded half to even
        _, chunks = draw_chunks(drawer(data), case, (2, 2))
        assert len(chunks.cuts) == 5


def test_gradient_cells_check_theirs_first_and_forward_cells_last():
    assert GRADIENT_FIXED_CASES.first == (MIXED_COUNTS, NOTHING_SELECTED)
    assert GRADIENT_FIXED_CASES.last == (WIDE_HALF_BATCH,) and WIDE_HALF_BATCH.dtypes == ("float16",)
    assert FORWARD_FIXED_CASES.last == (LONG_ROWS, MANY_ROWS, MIXED_COUNTS, NOTHING_SELECTED)
    assert not FORWARD_FIXED_CASES.first
    assert fixed_cases("gradients") is GRADIENT_FIXED_CASES
    assert fixed_cases("gradients", split=True) is SPLIT_GRADIENT_FIXED_CASES  # a split's chunks: at most 16 rows
    assert SPLIT_GRADIENT_FIXED_CASES.first == GRADIENT_FIXED_CASES.first and not SPLIT_GRADIENT_FIXED_CASES.last
    assert fixed_cases("forward") is FORWARD_FIXED_CASES
    # an engine's forward cells: the long rows and the many rows, after their draws
    assert fixed_cases("forward", split=True) is SPLIT_FORWARD_FIXED_CASES
    assert SPLIT_FORWARD_FIXED_CASES.last == (LONG_ROWS, MANY_ROWS) and not SPLIT_FORWARD_FIXED_CASES.first


def _ratio_of_detached_terms():
    """The magnitude diagnostic, right in its values, whose ratio carries no gradient: it is rebuilt from detached
    terms, kept on the graph by `+ 0 * s.sum()`. Its ratio only depends on the inputs where the rows' counts
    differ (with equal counts it is that count), so only such a case with a nonzero ratio cotangent shows it."""
    import torch

    def cut(token_log_probs, advantages, token_mask):
        acc = torch.promote_types(token_log_probs.dtype, torch.float32)
        s = advantages.to(acc) * torch.where(token_mask, token_log_probs.to(acc), 0).sum(-1)
        n = token_mask.sum(-1)
        a = torch.where(n > 0, s / n.clamp(min=1), 0)
        den = a.detach().abs().sum()
        r = torch.where(den > 0, s.detach().abs().sum() / torch.where(den > 0, den, 1), 0) + 0 * s.sum()
        dtype = token_log_probs.dtype
        return {"sequence_summed": s.to(dtype), "token_averaged": a.to(dtype), "magnitude_ratio": r.to(dtype)}

    return cut


def _ratio_guarded_by_where():
    """The magnitude diagnostic with its ratio guarded as `where(D > 0, N / D, 0)`: right in every value, but when
    D = 0 (nothing selected) autograd differentiates the discarded N / D, and 0 / 0 makes every gradient NaN."""
    import torch

    def guarded(token_log_probs, advantages, token_mask):
        acc = torch.promote_types(token_log_probs.dtype, torch.float32)
        s = advantages.to(acc) * torch.where(token_mask, token_log_probs.to(acc), 0).sum(-1)
        n = token_mask.sum(-1)
        a = torch.where(n > 0, s / n.clamp(min=1), 0)
        den = a.abs().sum()
        r = torch.where(den > 0, s.abs().sum() / den, 0)
        dtype = token_log_probs.dtype
        return {"sequence_summed": s.to(dtype), "token_averaged": a.to(dtype), "magnitude_ratio": r.to(dtype)}

    return guarded


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("make", "kind", "fixed_case"), [
    (_ratio_of_detached_terms, "d token_log_probs out of tolerance", "rows of different counts, one of them 0"),
    (_ratio_guarded_by_where, "non-finite gradient", "nothing selected"),
])
def test_a_backward_bug_that_needs_a_fixed_case_is_found_at_any_seed(make, kind, fixed_case, seed):
    report = fuzz.check(make(), framework="torch", dtypes=["float32"], max_examples=1, gradient_examples=1,
                        seed=seed)
    (gradients,) = [cell for cell in report.cells if cell.check == "gradients"]
    assert not gradients.ok and [bug.kind for bug in gradients.bugs] == [kind]
    assert dict(gradients.bugs[0].case.story)["fixed case"] == fixed_case
    # the report says it is a fixed case, not a shrunk ("minimal") one
    printed = "\n".join(bugs(report.cells))
    assert "  case: fixed case=" in printed and "minimal case" not in printed


def _chunk_loss_guarded_by_where():
    """A token-mean per-chunk loss, `where(N > 0, sum / N, 0)` with the step's N and the mask multiplied in: when
    the step selects nothing, the discarded 0 / 0 reaches every token's gradient as NaN (0 * NaN)."""
    import torch

    def chunk_loss(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
        acc = torch.promote_types(token_losses.dtype, torch.float32)
        total = (token_losses.to(acc) * token_mask).sum()
        count = torch.tensor(float(num_tokens), dtype=acc)
        return torch.where(count > 0, total / count * dp_size, 0.0).to(token_losses.dtype)

    return chunk_loss


def test_an_engines_gradient_cells_check_the_fixed_cases_too():
    report = fuzz.check(_chunk_loss_guarded_by_where(), framework="torch", accumulation=True, reduction="token-mean",
                        dtypes=["float32"], max_examples=1, gradient_examples=1)
    failing = [cell for cell in report.cells if "gradients" in cell.check and not cell.ok]
    assert failing and all(dict(cell.bugs[0].case.story)["fixed case"] == "nothing selected" for cell in failing)


def _chunk_loss_counted_in_bfloat16():
    """A token-mean per-chunk loss whose step count N is kept in bfloat16 (a model's compute dtype): 3093 tokens,
    the fixed case's, are 3088 there."""
    import torch

    def chunk_loss(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
        acc = torch.promote_types(token_losses.dtype, torch.float32)
        total = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
        count = torch.tensor(float(num_tokens)).to(torch.bfloat16).to(acc)
        return torch.where(count > 0, total / count.clamp(min=1) * dp_size, 0.0)

    return chunk_loss


@pytest.mark.parametrize("seed", [0, 1])
def test_an_engines_forward_cells_check_the_fixed_cases_after_their_draws(seed):
    """The draws' values of both signs hide a count off by one part in 600 under a float32 sum's allowance; the
    fixed case of long rows, its values of one sign, shows it on micro-batches as in one process."""
    report = fuzz.check(_chunk_loss_counted_in_bfloat16(), framework="torch", accumulation=True,
                        reduction="token-mean", dtypes=["float32"], max_examples=1, gradients=False, seed=seed)
    failing = [cell for cell in report.cells if not cell.ok]
    assert failing and all(dict(cell.bugs[0].case.story)["fixed case"] == LONG_ROWS.name for cell in failing)


def _fixed_case_subject():
    return Subject("stub", lambda *args: None, load_framework("numpy"), get_contract("magnitude"), (), "stub")


@pytest.mark.parametrize("second", ["fails", "times out"])
def test_fixed_cases_run_in_order_and_each_failure_is_reported_or_a_time_limit_ends_the_cell(second):
    seen = []

    def example_check(subject, case, data, repeat):
        seen.append(dict(case.story).get("fixed case"))
        verdict = Verdict()
        if len(seen) == 1:
            verdict.fail("first kind", "the first fixed case fails")
        elif second == "fails":
            verdict.fail("second kind", "the second fixed case fails otherwise")
        else:
            raise CallTimedOut(None, 1.0)
        return verdict

    def run():
        return fuzz_cell(_fixed_case_subject(), dtype="float32", device="cpu", layouts=("contiguous",), max_examples=5,
                         seed=0, check="gradients", example_check=example_check, fixed=GRADIENT_FIXED_CASES)

    if second == "fails":
        cell = run()
        assert sorted(bug.kind for bug in cell.bugs) == ["first kind", "second kind"]
    else:  # the first's counterexample and the second's time limit come grouped: the time limit ends the cell
        with pytest.raises(CallTimedOut):
            run()
    assert seen == [anchor.name for anchor in GRADIENT_FIXED_CASES.first]  # in order, and nothing drawn after a failure


def _count_in_bfloat16():
    """Counts the selected tokens in the input dtype: NumPy sums ml_dtypes.bfloat16 in bfloat16, which stops
    counting by ones at 256, so a row of more selected tokens than that gets a wrong mean."""

    def counted(token_log_probs, advantages, token_mask):
        summed = advantages.astype(np.float64) * np.where(token_mask, token_log_probs.astype(np.float64), 0).sum(-1)
        n = token_mask.astype(token_log_probs.dtype).sum(-1).astype(np.float64)
        averaged = np.divide(summed, n, out=np.zeros_like(summed), where=n > 0)
        den = np.abs(averaged).sum()
        ratio = np.abs(summed).sum() / den if den > 0 else 0.0
        dtype = token_log_probs.dtype
        return {"sequence_summed": summed.astype(dtype), "token_averaged": averaged.astype(dtype),
                "magnitude_ratio": np.asarray(ratio).astype(dtype)}

    return counted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_forward_bug_the_draws_miss_is_found_by_a_fixed_case_after_them(seed):
    report = fuzz.check(_count_in_bfloat16(), framework="numpy", dtypes=["bfloat16"], max_examples=1, seed=seed)
    (cell,) = report.cells
    assert not cell.ok and dict(cell.bugs[0].case.story)["fixed case"] == LONG_ROWS.name


def _reduction_counted_in(half: str):
    """A token-mean whose N is the mask cast to a half-precision dtype and summed (as a model's compute dtype
    would have it), the losses summed right in float32 or float64: one rounding of N, as torch and JAX sum."""
    dtype = {"bfloat16": BFLOAT16, "float16": np.float16}[half]

    def loss(token_losses, token_mask):
        accumulate = np.float64 if token_losses.dtype == np.float64 else np.float32
        total = np.where(token_mask, token_losses.astype(accumulate), 0).sum()
        count = token_mask.astype(np.float32).sum().astype(dtype).astype(accumulate)
        return np.asarray(total / max(count, 1), dtype=accumulate)

    return loss


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_count_kept_in_half_precision_fails_a_float32_cell_on_the_fixed_case(half, seed):
    """One rounding of N = 3093 is off by one part in 3093 (float16) or 600 (bfloat16): with values of both signs
    that hides under a float32 sum's allowance; the fixed case's values of one sign show it."""
    report = fuzz.check(_reduction_counted_in(half), framework="numpy", reduction="token-mean", dtypes=["float32"],
                        max_examples=1, seed=seed, gradients=False)
    (cell,) = report.cells
    assert not cell.ok and dict(cell.bugs[0].case.story)["fixed case"] == LONG_ROWS.name
    assert f"N = 3093 rounded to {half}: the token count kept in {half}" in cell.failures[0]


def _rows_summed_in_input_dtype(token_losses, token_mask):
    """A token-mean whose rows are each summed right (in float32, or float64), the batch's total then kept in the
    input dtype row after row: a per-sample loop's running total (`total = total + row_loss`)."""
    dtype = token_losses.dtype
    accumulate = np.float64 if dtype == np.float64 else np.float32
    total = dtype.type(0)
    for row in np.where(token_mask, token_losses.astype(accumulate), 0):
        total = dtype.type(total + row.sum().astype(dtype))
    return np.asarray(accumulate(total) / max(int(token_mask.sum()), 1), dtype=accumulate)


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_sum_over_rows_kept_in_half_precision_fails_on_the_fixed_case_of_many_rows(half, seed):
    """The draws' batches of at most 32 rows round such a total too few times to show; 4096 rows stall it."""
    report = fuzz.check(_rows_summed_in_input_dtype, framework="numpy", reduction="token-mean", dtypes=[half],
                        max_examples=1, seed=seed, gradients=False)
    (cell,) = report.cells
    assert not cell.ok and dict(cell.bugs[0].case.story)["fixed case"] == MANY_ROWS.name
    assert f"the batch's sum accumulated in {half} one position at a time" in cell.failures[0]


def _fixed_length_over(divided_by_b_where):
    """Fixed length computed as sum / B where `divided_by_b_where(B)` (L_max left out), else right (sum / (B L_max)):
    NumPy, float32 arithmetic in float32 cells."""

    def loss(token_losses, token_mask):
        accumulate = np.float64 if token_losses.dtype == np.float64 else np.float32
        total = np.where(token_mask, token_losses.astype(accumulate), 0).sum()
        batch = token_losses.shape[0]
        divisor = batch if divided_by_b_where(batch) else batch * 64
        return np.asarray(total / max(divisor, 1), dtype=accumulate)

    return loss


def test_a_wrong_loss_its_shrunk_case_names_ambiguously_is_named_on_the_case_of_mixed_counts():
    """Shrunk to one token, sum / B equals the padded width's, every position's and L_max left out's losses at once;
    its failure also says what it equals on the 4 x 7 batch of different counts, where only L_max left out matches.
    A function right on that batch gets nothing more."""
    left_out = "the exact seq-mean-token-sum (rows=all), sum / D alone: L_max left out, or the wrong mode declared?"
    added = f" (on the fixed case '{MIXED_COUNTS.name}', 4 x 7, where they give different values: it equals "
    report = fuzz.check(_fixed_length_over(lambda batch: True), framework="numpy", dtypes=["float32"],
                        reduction="seq-mean-token-sum-norm", l_max=64, gradients=False)
    (cell,) = report.cells
    (message,) = cell.bugs[0].failures
    shrunk, _, there = message.partition(added)
    assert ALTERNATIVES in shrunk and left_out in shrunk
    assert there.endswith(f"{left_out})") and ALTERNATIVES not in there
    assert added not in cell.bugs[0].snippet  # the snippet reproduces the shrunk case alone
    report = fuzz.check(_fixed_length_over(lambda batch: batch == 1), framework="numpy", dtypes=["float32"],
                        reduction="seq-mean-token-sum-norm", l_max=64, gradients=False)
    (cell,) = report.cells
    (message,) = cell.bugs[0].failures
    assert ALTERNATIVES in message and "on the fixed case" not in message


def test_a_function_that_hangs_on_the_case_of_mixed_counts_keeps_its_shrunk_bug():
    """The extra call on the 4 x 7 case is the function's like any other: where it overruns the time limit, the bug
    the draws found is reported as it was, with nothing added."""
    wrong = _fixed_length_over(lambda batch: True)

    def hangs_on_four_rows(token_losses, token_mask):
        while token_losses.shape == (4, 7):
            pass
        return wrong(token_losses, token_mask)

    report = fuzz.check(hangs_on_four_rows, framework="numpy", dtypes=["float32"], timeout=1,
                        reduction="seq-mean-token-sum-norm", l_max=64, gradients=False)
    (cell,) = report.cells
    (message,) = cell.bugs[0].failures
    assert cell.bugs[0].kind == "loss out of tolerance" and ALTERNATIVES in message
    assert "on the fixed case" not in message


def _token_mean(xp):
    def loss(token_losses, token_mask):
        accumulate = xp.float64 if token_losses.dtype == xp.float64 else xp.float32
        total = xp.where(token_mask, token_losses.astype(accumulate), 0).sum()
        return xp.asarray(total / xp.maximum(token_mask.sum(), 1), dtype=accumulate)

    return loss


@pytest.mark.parametrize(("framework", "dtype", "checks_many_rows"),
                         [("numpy", "float16", True), ("numpy", "bfloat16", True), ("numpy", "float32", False),
                          ("jax", "float16", False)])
def test_the_fixed_case_of_many_rows_is_checked_by_half_precision_cells_of_code_not_compiled(
        monkeypatch, framework, dtype, checks_many_rows):
    """4096 rows show only a half-precision total; compiled, a loop over them would unroll past a call's time
    limit."""
    import fuzz.run.cell

    checked = []

    class Recording(AnchorDraws):
        def __init__(self, anchor, contract):
            checked.append(anchor.name)
            super().__init__(anchor, contract)

    monkeypatch.setattr(fuzz.run.cell, "AnchorDraws", Recording)
    if framework == "jax":
        import jax.numpy as xp
    else:
        xp = np
    report = fuzz.check(_token_mean(xp), framework=framework, reduction="token-mean", dtypes=[dtype],
                        max_examples=1, gradients=False)
    assert all(cell.ok for cell in report.cells)
    assert (MANY_ROWS.name in checked) == checks_many_rows
    assert {LONG_ROWS.name, MIXED_COUNTS.name, NOTHING_SELECTED.name} <= set(checked)


@pytest.mark.parametrize(("builtin", "engine", "compiled"), [
    ("torch-distributed", "torch", False), ("jax-shard-map", "jax", True)])
def test_an_engine_that_compiles_on_its_ranks_makes_its_cells_those_of_compiled_code(builtin, engine, compiled):
    """shard_map runs under jit on the mesh: its cells skip the 4096 rows, as a jax.jit cell does."""
    from fuzz.engines.cell import engine_subject
    from fuzz.run.subjects import SubjectSpec

    subject = engine_subject(SubjectSpec.of(builtin), engine)
    assert subject.compiled is compiled and MANY_ROWS.checked_by("bfloat16", subject.compiled) is not compiled


def test_a_forward_bug_the_draws_find_keeps_its_minimal_case():
    def mask_ignored(token_log_probs, advantages, token_mask):
        summed = advantages * token_log_probs.sum(-1)
        return {"sequence_summed": summed, "token_averaged": summed / max(token_log_probs.shape[-1], 1),
                "magnitude_ratio": np.asarray(float(token_log_probs.shape[-1]), token_log_probs.dtype)}

    report = fuzz.check(mask_ignored, framework="numpy", dtypes=["float64"], seed=0)
    (cell,) = report.cells
    assert not cell.ok and all("fixed case" not in dict(bug.case.story) for bug in cell.bugs)
    assert "minimal case:" in "\n".join(bugs(report.cells))


def _token_mean_with_float32_count(token_losses, token_mask):
    import torch

    acc = torch.promote_types(token_losses.dtype, torch.float32)
    return torch.where(token_mask, token_losses.to(acc), 0).sum() / token_mask.sum().clamp(min=1)


def test_a_float16_gradient_cell_checks_the_wide_batch_after_its_draws_and_no_other_cell_does():
    """64 rows of 1031 tokens, past float16's 65504 in N: a correct loss conforms on it, in the float16 gradient cell
    only, after that cell's draws (one example more than the float32 cell's); the float32 cell, whose fixed cases
    after its draws are none, ends with its draws."""
    pytest.importorskip("torch")
    try:
        report = fuzz.check(_token_mean_with_float32_count, framework="torch", reduction="token-mean",
                            dtypes=["float16", "float32"], max_examples=3, gradient_examples=3)
    except unittest.SkipTest as error:  # Hypothesis' "no test cases" from a cell's empty list of them: a crash here
        pytest.fail(f"a cell ran no examples: {error}")
    assert report.ok, report.failures
    gradient_cells = {cell.dtype: cell for cell in report.cells if cell.check == "gradients"}
    assert gradient_cells["float16"].examples == gradient_cells["float32"].examples + 1
