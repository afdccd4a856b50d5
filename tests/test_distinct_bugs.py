"""Every distinct bug of a cell in one report, each shrunk on its own with a snippet that reproduces it; and
the gradient verdicts at the edges of half precision: overflow reported as overflow, any subgradient of |x|
accepted at its kink; a non-finite output named by what in the case makes the usual mistakes non-finite."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fuzz.cli import check_parser, run_check
from fuzz.engines.registry import MODULES, engine_named
from fuzz.judge.gradients import GRADIENT_OVERFLOW, check_gradients
from fuzz.judge.subject import Subject
from fuzz.report.results import bug_key, engine_of, pass_of, split_and_pass, split_of
from reference.case import Case
from reference.contracts import get_contract
from reference.dtypes import round_to
from reference.magnitude import complete_cotangents, vjp

ROOT = Path(__file__).resolve().parents[1]

TWO_BUGS = """
    import torch

    def normalize(token_log_probs, advantages, token_mask):
        selected = (token_log_probs * token_mask).sum()  # multiplies -inf padding by 0, and sums the whole batch
        s = advantages * selected
        a = s / token_mask.sum(dim=-1).clamp(min=1).to(s.dtype)
        d = a.abs().sum()
        r = torch.where(d > 0, s.abs().sum() / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(d))
        return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r}
"""


def _snippet_run(snippet: str, folder: Path) -> subprocess.CompletedProcess:
    """A snippet saved in `folder` and run there as a fresh Python process."""
    script = folder / "snippet.py"
    script.write_text(snippet)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=folder, timeout=120)


def test_two_bugs_are_both_reported_each_with_a_snippet_that_reproduces_it(tmp_path):
    path = tmp_path / "two_bugs.py"
    path.write_text(textwrap.dedent(TWO_BUGS))
    args = check_parser().parse_args([f"{path}:normalize", "--framework", "torch", "--dtypes", "float32",
                                      "--jobs", "1", "--no-gradients"])
    (cell,) = run_check(args)
    kinds = [bug.kind for bug in cell.bugs]
    assert set(kinds) == {"non-finite output", "sequence_summed out of tolerance"}, kinds
    for bug in cell.bugs:
        failed = _snippet_run(bug.snippet, tmp_path)
        assert failed.returncode != 0 and "AssertionError" in failed.stderr, (bug.kind, failed.stderr[-2000:])
    summed = next(bug for bug in cell.bugs if bug.kind == "sequence_summed out of tolerance")
    assert summed.case.shape[0] >= 2  # the batch-wide sum only shows with two rows or more


def _plain_half_precision():
    import torch

    def plain(token_log_probs, advantages, token_mask):
        s = advantages * torch.where(token_mask, token_log_probs, torch.zeros_like(token_log_probs)).sum(dim=-1)
        a = s / token_mask.sum(dim=-1).clamp(min=1).to(s.dtype)
        n, d = s.abs().sum(), a.abs().sum()
        r = torch.where(d > 0, n / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(d))
        return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r}

    return plain


def _subject(function, framework: str) -> Subject:
    from impls.frameworks import load_framework

    return Subject("test", function, load_framework(framework), get_contract("magnitude"), (), "f")


def test_a_float16_backward_that_overflows_is_reported_as_an_overflow():
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    lp = round_to(-rng.uniform(0.001, 0.01, (1, 512)), "float16")
    case = Case(lp, np.array([round_to(0.01, "float16")]), np.ones((1, 512), bool), dtype="float16")
    cotangents = complete_cotangents({"magnitude_ratio": np.array(1.0)}, 1)
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents)
    verdict = check_gradients(_subject(_plain_half_precision(), "torch"), case, cotangents, exact)
    assert verdict.kind == GRADIENT_OVERFLOW, verdict.failures
    assert "overflowed float16" in str(verdict.failures[0]) and "float32" in str(verdict.failures[0])
    # the same code in bfloat16, whose range is float32's, conforms
    case16 = case.with_(dtype="bfloat16", token_log_probs=round_to(lp, "bfloat16"),
                        advantages=round_to(case.advantages, "bfloat16"))
    exact16 = vjp(case16.token_log_probs, case16.advantages, case16.token_mask, cotangents)
    assert check_gradients(_subject(_plain_half_precision(), "torch"), case16, cotangents, exact16).ok


def test_a_float16_backward_that_overflows_under_a_zero_ratio_cotangent_is_an_overflow_too():
    """The ratio's cotangent is 0, yet the backward forms N / D^2 (torch's (N / D) / D; JAX's 1 / D^2): past
    float16's range it is inf, and 0 * inf is NaN. That is the dtype's limit, found by a 10x run of the plain
    float16 solution (tests/corpus/torch_plain_input_dtype.py), not a bug of the formula."""
    pytest.importorskip("torch")
    case = Case(np.array([[0.00048279762268066406, 0.004535675048828125, 420.5]]),
                np.array([0.004131317138671875]), np.array([[True, False, False]]), dtype="float16")
    cotangents = complete_cotangents({"sequence_summed": np.array([0.125732421875]),
                                      "token_averaged": np.array([-0.132080078125]),
                                      "magnitude_ratio": np.array(0.0)}, 1)
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents)
    verdict = check_gradients(_subject(_plain_half_precision(), "torch"), case, cotangents, exact)
    assert verdict.kind == GRADIENT_OVERFLOW, verdict.failures
    assert "formed as N / D^2 or 1 / D^2 whatever the cotangent" in str(verdict.failures[0])


def test_any_subgradient_of_abs_at_its_kink_is_accepted():
    """jnp.abs differentiates to 1 at 0, torch.abs to 0: a row with A_i = 0 takes either."""
    pytest.importorskip("jax")
    import jax.numpy as jnp

    def port(token_log_probs, advantages, token_mask):
        s = advantages.astype(jnp.float32) * jnp.sum(jnp.where(token_mask, token_log_probs, 0), -1, dtype=jnp.float32)
        a = s / jnp.maximum(token_mask.sum(-1), 1).astype(jnp.float32)
        d = jnp.sum(jnp.abs(a))
        r = jnp.where(d > 0, jnp.sum(jnp.abs(s)) / jnp.where(d > 0, d, 1.0), 0.0)
        return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r}

    # row 0 has s_0 = 0 exactly; with n_0 = 3 != R = 1 its ratio terms do not cancel, so the subgradient matters
    case = Case(np.array([[-1.0, -2.0, -3.0], [-3.0, -4.0, -5.0]]), np.array([0.0, 2.0]),
                np.array([[True, True, True], [True, False, False]]))
    cotangents = complete_cotangents({"magnitude_ratio": np.array(1.0)}, 2)
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents)
    verdict = check_gradients(_subject(port, "jax"), case, cotangents, exact)
    assert verdict.ok, verdict.failures


def _multiplies_the_mask(token_losses, token_mask):  # the classic: -inf padding times a 0 mask is NaN
    with np.errstate(invalid="ignore"):
        return np.asarray((token_losses * token_mask).sum() / max(token_mask.sum(), 1))


def _mean_of_row_means(token_losses, token_mask):  # an empty row's mean divides 0 by 0
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(token_mask, token_losses, 0).sum(-1) / token_mask.sum(-1)
        return np.asarray(means.sum() / np.float64(len(means)))


@pytest.mark.parametrize(("function", "mode", "hint"), [
    (_multiplies_the_mask, "token-mean", "masked-out token_losses hold -inf: multiplied by the mask (0 * inf is NaN)"
                                         " rather than selected with a where? (where your padding is finite by "
                                         "construction, declare it: --masked-values finite"),
    (_mean_of_row_means, "seq-mean-token-mean", "a mean over none of them (0 / 0)?"),
])
def test_a_non_finite_loss_says_what_in_the_case_makes_it_so(function, mode, hint):
    from fuzz import check

    report = check(function, framework="numpy", reduction=mode, dtypes=["float64"], max_examples=40, seed=0)
    assert not report.ok
    assert any(f.kind == "non-finite output" and hint in f.message for f in report.failures), report.failures


def test_an_empty_selection_in_float16_says_an_epsilon_is_no_guard_there():
    """`sum / (count + 1e-8)` in float16: 1e-8 rounds to 0 there, so nothing selected is still 0 / 0; the hint
    says so in float16, where it is so, and not in bfloat16 (whose range holds 1e-8)."""
    from fuzz.judge.forward import non_finite_hint

    contract = get_contract("reduction")
    empty = {"token_losses": [[1.0, 2.0]], "token_mask": [[False, False]], "contract": contract}
    assert non_finite_hint(Case(dtype="float16", **empty)).endswith(
        "(0 / 0; an epsilon added to the count is no guard in float16: 0 + 1e-8 rounds to 0 (clamp the count to 1 "
        "instead))?")
    assert non_finite_hint(Case(dtype="bfloat16", **empty)).endswith("mean over none of them (0 / 0)?")


def test_a_batch_of_no_tokens_names_the_padded_width_as_a_length_too():
    """`sum / (B * token_mask.shape[-1])` (L_max from the shape) is 0 / 0 on a batch of width 0: the hint names a
    length read from the shape beside a mean over nothing; a batch with tokens does not."""
    from fuzz.judge.forward import non_finite_hint

    contract = get_contract("reduction")
    width_0 = non_finite_hint(Case(np.zeros((2, 0)), np.zeros((2, 0), bool), contract=contract))
    assert width_0.endswith("; or a length taken from the shape (the padded width, 0 here)?"), width_0
    assert "padded width" not in non_finite_hint(Case([[1.0, 2.0]], [[False, False]], contract=contract))


def test_a_batch_of_no_rows_names_a_mean_over_rows_and_a_division_by_b():
    """TRL's grpo (`(... / counts).mean()`) and dr_grpo (`sum / (B * L_max)`) are 0 / 0 on a batch of no rows: the
    hint names the rows; a batch with rows does not."""
    from fuzz.judge.forward import non_finite_hint

    contract = get_contract("reduction")
    no_rows = non_finite_hint(Case(np.zeros((0, 3)), np.zeros((0, 3), bool), contract=contract))
    assert "; or the batch has no rows: a mean over its rows (`.mean()` of an empty array is NaN), or a division by " \
           "their number (B = 0)?" in no_rows, no_rows
    assert "no rows" not in non_finite_hint(Case(np.zeros((2, 0)), np.zeros((2, 0), bool), contract=contract))


def test_finite_padding_that_a_row_sum_carries_past_the_range_is_named():
    """prime-rl's `token_losses[0].sum() * 0.0` (a term kept for the graph): in float16, huge finite padding sums to
    inf, and inf * 0 is NaN. The hint says so where the padding overflows the dtype and the selected values do not;
    not in float32, whose range holds the same values."""
    from fuzz.judge.forward import non_finite_hint

    contract = get_contract("reduction")
    huge = {"token_losses": [[1.0, 40000.0, 40000.0]], "token_mask": [[True, False, False]], "contract": contract}
    hint = non_finite_hint(Case(dtype="float16", **huge))
    assert hint == ("masked-out token_losses are finite but large (up to 4e+04): a sum that includes them overflows "
                    "float16 to inf, and inf times 0 (a mask, or a `* 0.0` kept for the graph) is NaN: select with a "
                    "where before summing?"), hint
    assert non_finite_hint(Case(dtype="float32", **huge)) is None
    # padding whose values cancel in the row's sum overflows nothing
    cancelling = {**huge, "token_losses": [[1.0, 40000.0, -40000.0]]}
    assert non_finite_hint(Case(dtype="float16", **cancelling)) is None


def _graph_anchor_sums_the_padding(token_losses, token_mask):  # the padding summed in float16, times 0
    with np.errstate(over="ignore", invalid="ignore"):
        kept = token_losses.sum(dtype=token_losses.dtype) * token_losses.dtype.type(0)
        mean = np.where(token_mask, token_losses, 0).sum(dtype=np.float32) / max(int(token_mask.sum()), 1)
        return np.asarray(mean + kept, dtype=np.float32)


def test_a_nan_from_huge_finite_padding_is_explained_at_the_default_budget():
    from fuzz import check

    report = check(_graph_anchor_sums_the_padding, framework="numpy", reduction="token-mean", dtypes=["float16"],
                   masked_values="finite", seed=0)
    assert not report.ok
    assert any(f.kind == "non-finite output" and "are finite but large" in f.message for f in report.failures), \
        report.failures


def test_no_hint_where_the_case_holds_nothing_that_makes_a_usual_mistake_non_finite():
    from fuzz.judge.forward import non_finite_hint

    contract = get_contract("reduction")
    assert non_finite_hint(Case([[1.0, 2.0]], [[True, False]], contract=contract)) is None
    assert "-inf" in non_finite_hint(Case([[1.0, -np.inf]], [[True, False]], contract=contract))
    # NaN padding alone is named for what it does: there is no inf to multiply
    assert "(0 * NaN is NaN)" in non_finite_hint(Case([[1.0, np.nan]], [[True, False]], contract=contract))


def _sums_in_float32(token_losses, token_mask):  # float32 inside float64 code
    selected = np.where(token_mask, token_losses, 0).astype(np.float32)
    return np.asarray(selected.sum(dtype=np.float32) / max(token_mask.sum(), 1), dtype=np.float64)


def test_a_float64_loss_off_by_float32_rounding_is_named_so():
    from fuzz import check

    report = check(_sums_in_float32, framework="numpy", reduction="token-mean", dtypes=["float64"],
                   max_examples=40, seed=0)
    assert not report.ok
    assert "computed in float32 inside float64 code?" in report.failures[0].message, report.failures[0].message
    padded = check(lambda t, m: np.asarray(np.where(m, t, 0).sum() / max(m.size, 1)), framework="numpy",
                   reduction="token-mean", dtypes=["float64"], max_examples=40, seed=0)
    assert "float32" not in padded.failures[0].message  # a bug far beyond float32's rounding is not one


def test_a_nan_gradient_from_a_where_guarded_division_by_a_count_of_0_is_named_so():
    from fuzz import check

    torch = pytest.importorskip("torch")

    def divides_first(token_losses, token_mask):  # each token's share, where its row has a token: NaN backward
        count = token_mask.sum(-1, keepdim=True)
        share = torch.where(count > 0, token_losses.float() / count, 0)
        return torch.where(token_mask, share, 0).sum() / max(len(token_losses), 1)

    report = check(divides_first, framework="torch", reduction="seq-mean-token-mean", dtypes=["float32"],
                   gradients=True, max_examples=40, seed=0)
    assert any("a division by its count of 0 guarded by a where" in failure.message for failure in report.failures)


def test_a_nan_float16_gradient_from_an_epsilon_guard_names_the_epsilon_too():
    """NeMo-RL's masked_mean in float16 (`sum(values * mask) / (count + 1e-8)` in float32) on an all-masked batch:
    the backward's 1 / 1e-8 overflows float16 and meets the mask's 0. The hint names that guard beside the where
    one in float16, and only there (in bfloat16 1e8 is finite)."""
    from fuzz.judge.gradients import _non_finite

    nan, mask = np.array([[np.nan]]), np.array([[False]])
    kind, message = _non_finite("d token_losses", nan, None, mask, "float16", {})
    assert kind == "non-finite gradient"
    assert "guarded by a where" in message and "or by an epsilon (1 / (0 + 1e-8) is 1e8" in message, message
    assert "epsilon" not in _non_finite("d token_losses", nan, None, mask, "bfloat16", {})[1]
    assert "epsilon" not in _non_finite("d token_losses", nan, None, np.array([[True]]), "float16", {})[1]


def _unguarded_torch(token_losses, token_mask):
    mask = token_mask.to(token_losses.dtype)
    return (token_losses * mask).sum() / mask.sum()


def _unguarded_jax(token_losses, token_mask):
    mask = token_mask.astype(token_losses.dtype)
    return (token_losses * mask).sum() / mask.sum()


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_nan_gradient_of_an_unguarded_division_is_not_read_as_a_guarded_one(framework):
    """`(losses * mask).sum() / mask.sum()` on an all-masked batch: its loss is NaN too, so no guard kept the NaN out
    of the forward; the gradient's hint says that, not "guarded by a where", in every framework."""
    from fuzz import check

    pytest.importorskip(framework)
    unguarded = _unguarded_torch if framework == "torch" else _unguarded_jax
    report = check(unguarded, framework=framework, reduction="token-mean", dtypes=["float32"], gradients=True,
                   masked_values="finite", max_examples=40, seed=0)
    messages = [failure.message for failure in report.failures if "d token_losses is not finite" in failure.message]
    assert messages, [failure.message for failure in report.failures]
    assert all("the outputs are not finite here either, so no guard kept it out of the forward: no token is "
               "selected: a mean over none of them" in message and "guarded by a where" not in message
               for message in messages), messages


def test_a_nan_gradient_with_a_nan_loss_gets_the_forwards_reading_of_the_case():
    """Where the loss is NaN too, the gradient's hint is what the forward's check says of the case: -inf padding
    multiplied by the mask here, not a guard around a division."""
    from fuzz.judge.forward import non_finite_hint
    from fuzz.judge.gradients import _non_finite

    case = Case([[1.0, -np.inf], [0.0, 0.0]], [[True, False], [False, False]], contract=get_contract("reduction"))
    message = _non_finite("d token_losses", np.array([[np.nan, 0.0]]), None, case.mask, "float32", {},
                          non_finite_hint(case))[1]
    assert "multiplied by the mask (0 * inf is NaN)" in message and "guarded by a where" not in message, message


def test_a_float64_gradient_off_by_float32_rounding_is_named_so():
    from fuzz import check

    torch = pytest.importorskip("torch")

    def sums_in_float32(token_losses, token_mask):
        selected = torch.where(token_mask, token_losses, 0).float()
        return (selected.sum() / token_mask.sum().clamp(min=1)).double()

    report = check(sums_in_float32, framework="torch", reduction="token-mean", dtypes=["float64"], gradients=True,
                   max_examples=40, seed=0)
    gradients = [failure.message for failure in report.failures if failure.message.startswith("d token_losses")]
    assert gradients and all("computed in float32 inside float64 code?" in message for message in gradients), (
        [failure.message for failure in report.failures])


def test_a_hint_on_the_case_is_said_once_in_a_verdict_and_referred_to_after():
    """-inf at masked positions multiplied by the mask makes every output non-finite: the hint (what in the case
    does it) is said for the first, and the others point to it, in the terminal and in the snippet's comments."""
    from fuzz.judge.forward import compare_values
    from fuzz.judge.outputs import ReadBack
    from fuzz.judge.verdict import NON_FINITE
    from reference.tolerance import PRECISIONS

    case = Case(np.array([[-1.0, -np.inf], [-2.0, -3.0]]), np.array([1.0, 2.0]),
                np.array([[True, False], [True, True]]))
    nan = {"sequence_summed": np.array([np.nan, -10.0]), "token_averaged": np.array([np.nan, -5.0]),
           "magnitude_ratio": np.array(np.nan)}
    verdict = compare_values(ReadBack(nan, dict.fromkeys(nan, "float32")), case, PRECISIONS["contract"])
    non_finite = [failure.message for failure in verdict.failures if failure.kind == NON_FINITE]
    assert len(non_finite) == 3
    assert "masked-out token_log_probs hold -inf: multiplied by the mask" in non_finite[0]
    assert non_finite[1:] == ["token_averaged is not finite: [nan -5.]: see sequence_summed above",
                              "magnitude_ratio is not finite: nan: see sequence_summed above"]


def _epsilon_guarded_mean(token_losses, token_mask):
    """NeMo-RL's masked_mean and torchtune's GRPOLoss: the mask multiplied in, the count guarded by an epsilon."""
    return (token_losses * token_mask.to(token_losses.dtype)).sum() / (token_mask.sum() + 1e-8)


@pytest.mark.parametrize("seed", range(4))
def test_a_float16_backward_that_overflows_on_an_empty_selection_is_found_at_the_default_budget(seed):
    """Its forward conforms (float32 loss, finite padding declared); only the float16 backward fails, on a batch with
    nothing selected, which is a fixed case of every gradient cell (fuzz.judge.anchors), whatever the seed."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_epsilon_guarded_mean, framework="torch", reduction="token-mean", masked_values="finite",
                   dtypes=["float16"], seed=seed)
    assert [(cell.check, cell.ok) for cell in report.cells] == [("forward", True), ("gradients", False)]
    assert any("or by an epsilon" in failure.message for failure in report.failures), str(report)


def _float32_chunk_loss(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    import torch

    selected = torch.where(token_mask, token_losses, 0).sum()
    return (selected / max(num_tokens, 1) * dp_size).float()  # float32 for float64 inputs


def test_a_per_chunk_loss_of_the_wrong_dtype_gets_a_snippet_that_fails_on_it(tmp_path):
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_float32_chunk_loss, framework="torch", reduction="token-mean", accumulation=True,
                   dtypes=["float64"], max_examples=10, seed=0, fail_fast=True)
    failure = next(f for f in report.failures if "dtype float32, expected float64" in f.message)
    path = tmp_path / "snippet.py"
    path.write_text(failure.snippet)
    run = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert run.returncode == 1 and "of dtype float32, want float64" in run.stderr, run.stdout + run.stderr


def test_a_float16_row_sum_that_overflows_is_named_as_that_overflow():
    """The plain formulation keeps a row's sum in float16: over 4096 tokens of -30 it passes -65504. With
    A_i = 0 the exact s_i is 0, and float16 gives 0 * -inf = NaN: a real failure, named for what overflowed."""
    pytest.importorskip("torch")
    from fuzz.judge.forward import check_forward
    from fuzz.judge.verdict import FORWARD_OVERFLOW
    from impls.frameworks import load_framework

    lp = np.full((2, 4096), -30.0)
    case = Case(lp, np.array([0.0, 1.0]), np.ones((2, 4096), bool), dtype="float16")
    verdict = check_forward(_plain_half_precision(), load_framework("torch"), case)
    assert verdict.kind == FORWARD_OVERFLOW, verdict.failures
    assert "the row sum of row 0 overflowed float16 (exact -1.23e+05" in str(verdict.failures[0])
    assert "keep the sum over tokens in float32" in str(verdict.failures[0])


def test_outputs_that_carry_no_gradient_are_named_so_on_the_first_example():
    """Detached outputs read back as zero gradients would be judged as values ("out of tolerance: 0.0") and pass
    wherever the exact gradient is near 0; they are a failure of their own, whatever the case."""
    from fuzz import check

    torch = pytest.importorskip("torch")

    def detached(token_log_probs, advantages, token_mask):
        with torch.no_grad():
            s = advantages * torch.where(token_mask, token_log_probs, 0).sum(dim=-1)
            a = s / token_mask.sum(dim=-1).clamp(min=1).to(s.dtype)
            n, d = s.abs().sum(), a.abs().sum()
            r = torch.where(d > 0, n / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(d))
        return {"sequence_summed": s, "token_averaged": a, "magnitude_ratio": r}

    report = check(detached, framework="torch", gradients=True, dtypes=["float64"], max_examples=1,
                   gradient_examples=1, seed=0)
    gradient_failures = [failure for failure in report.failures if failure.kind == "no gradient"]
    assert gradient_failures, report.failures
    assert "sequence_summed carries no gradient" in gradient_failures[0].message


def _raises_in_forward(token_losses, token_mask):
    raise ValueError("the function's own bug")


try:  # a module-level class: dynamo traces its apply, where it refuses to build a class inside a function
    import torch

    class _SummedWithAFailingBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("its backward's bug")
except ImportError:
    pass


def _raises_in_backward(token_losses, token_mask):
    selected = torch.where(token_mask, token_losses, 0).to(torch.promote_types(token_losses.dtype, torch.float32))
    return _SummedWithAFailingBackward.apply(selected) / token_mask.sum().clamp(min=1)


def _chunk_raises_in_forward(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    raise ValueError("the function's own bug")


@pytest.mark.parametrize("framework", ["torch", "torch-compile"])
def test_an_exception_is_named_by_the_pass_that_raised_it(framework):
    """A gradient cell runs the function and its backward in one call: what the function raised is the forward
    cell's bug, named the same (one distinct bug); only what its backward raised is a backward bug, torch.compile
    included, whose AOTAutograd traces the backward while the function is being called."""
    pytest.importorskip("torch")
    import fuzz

    kinds = {}
    for fn in (_raises_in_forward, _raises_in_backward):
        report = fuzz.check(fn, framework=framework, reduction="token-mean", dtypes=["float32"], max_examples=3)
        kinds[fn] = {cell.check: sorted({bug.kind for bug in cell.bugs}) for cell in report.cells}
    raised = {"torch": "ValueError", "torch-compile": "Unsupported"}[framework]  # dynamo wraps what it traces
    assert kinds[_raises_in_forward] == {"forward": [f"raised {raised}"], "gradients": [f"raised {raised}"]}
    assert kinds[_raises_in_backward]["forward"] == []
    assert [kind.split(" ")[:2] for kind in kinds[_raises_in_backward]["gradients"]] == [["backward", "raised"]]


def test_an_exception_of_a_micro_batchs_function_is_named_by_its_pass_too():
    pytest.importorskip("torch")
    import fuzz

    report = fuzz.check(_chunk_raises_in_forward, framework="torch", reduction="token-mean", accumulation=True,
                        dtypes=["float32"], max_examples=2)
    assert {kind for cell in report.cells for kind in (bug.kind for bug in cell.bugs)} == {"raised ValueError"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_engine_row_names_its_engine_apart_from_its_split_and_pass(name):
    """A distinct bug is keyed by its engine, not by the split or pass of the cell it shows in: every row an engine
    names (for every shape it runs, both passes) reads back as the engine's kind, and the split and pass as the rest."""
    engine = engine_named(name)
    for shape in engine.shapes("cpu"):
        for check in ("forward", "gradients"):
            row = engine.row(shape, check)
            assert engine_of(row) == engine.kind and split_and_pass(row) != "" and pass_of(row) == check
            assert f"{engine.kind} {split_and_pass(row)}" == row and split_of(row) in row.split()
            assert bug_key("f", "c", row, "k") == bug_key("f", "c", engine.row(engine.shapes("cpu")[0], "forward"), "k")
    assert engine_of("forward") == engine_of("gradients") == split_of("gradients") == "" != engine.kind


def test_a_combined_gradient_off_by_a_factor_is_named_by_the_split_and_is_the_losss_bug():
    """A per-chunk loss that leaves out dp_size: its gradient is named by the factor of the split, as its loss is,
    never by a single-process mistake that only matches the numbers (a 4 x 7 batch with N = 14 makes half of
    token-mean's gradient equal "the mean over all 28 positions"); the two are one distinct bug."""
    pytest.importorskip("torch")
    import fuzz

    path = Path(__file__).parent / "corpus" / "accumulation" / "torch_dp_size_missing.py"
    report = fuzz.check(f"{path}:loss_normalization", framework="torch", reduction="token-mean", accumulation=True,
                        dtypes=["float32"], max_examples=5, seed=0)
    gradients = [message for failure in report.failures if "gradients" in failure.check
                 for message in failure.message.splitlines()]
    assert any("the combined gradient is 0.5x the full-batch gradient with R = 2" in m for m in gradients), gradients
    assert not any("it is the gradient of" in message for message in gradients), gradients
    assert "1 distinct bug" in " ".join(str(report).split())


def _guarded_jax(token_losses, token_mask):
    import jax.numpy as jnp

    selected = jnp.where(token_mask, token_losses, 0).astype(jnp.promote_types(token_losses.dtype, jnp.float32))
    return selected.sum() / jnp.maximum(token_mask.sum(), 1)


def test_a_correct_jax_loss_passes_its_gradient_cells():
    """JAX hands back a single-output contract's result from jax.vjp as the array it is: its gradient cells judge
    the gradients, and find nothing wrong with what it returned."""
    from fuzz import check

    pytest.importorskip("jax")
    report = check(_guarded_jax, framework="jax", reduction="token-mean", dtypes=["float32", "bfloat16"],
                   max_examples=5)
    assert report.ok and any("gradients" in cell.check for cell in report.cells), report.failures


def test_a_function_returning_no_array_is_one_bug_not_a_missing_gradient_too():
    """A loss returned as None or a Python float is the forward's structure bug; its gradient cells say the same,
    not "carries no gradient (computed under no_grad?)", so the report has one distinct bug."""
    from fuzz import check

    pytest.importorskip("torch")
    for returned in (None, 0.5):
        report = check(lambda token_losses, token_mask, value=returned: value, framework="torch",
                       reduction="token-mean", dtypes=["float32"], max_examples=5)
        assert {failure.kind for failure in report.failures} == {"wrong output structure"}, report.failures
        assert all("carries no gradient" not in failure.message for failure in report.failures)


def _torch_loss_of_shape_one(token_losses, token_mask):
    import torch

    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    return (selected.sum() / token_mask.sum().clamp(min=1)).reshape(1)


def _jax_loss_of_shape_one(token_losses, token_mask):
    import jax.numpy as jnp

    selected = jnp.where(token_mask, token_losses, 0).astype(jnp.promote_types(token_losses.dtype, jnp.float32))
    return (selected.sum() / jnp.maximum(token_mask.sum(), 1)).reshape(1)


@pytest.mark.parametrize("framework, function", [("torch", _torch_loss_of_shape_one), ("jax", _jax_loss_of_shape_one)])
def test_a_loss_of_the_wrong_shape_is_one_bug_not_a_backward_that_raised_too(framework, function):
    """A loss of shape (1,) where the contract's is 0-d: the backward the gradient cell starts from a 0-d cotangent
    raises (torch's "Mismatch in shape", JAX's cotangent shape error), and that is the forward's structure bug,
    which the gradient cells name as the forward cells do: one distinct bug, not "backward raised RuntimeError"."""
    from fuzz import check

    pytest.importorskip(framework)
    report = check(function, framework=framework, reduction="token-mean", dtypes=["float32"], max_examples=5)
    assert {cell.check for cell in report.cells if not cell.ok} == {"forward", "gradients"}, report.cells
    assert {failure.kind for failure in report.failures} == {"wrong output structure"}, report.failures
    assert all("has shape (1,), expected ()" in failure.message for failure in report.failures), report.failures


def _torch_loss_with_metrics(token_losses, token_mask):
    loss = _torch_loss_of_shape_one(token_losses, token_mask).reshape(())
    return loss, {"tokens": token_mask.sum()}


def _torch_metrics_and_loss(token_losses, token_mask):
    import torch

    return {"tokens": token_mask.sum().to(torch.float32), "loss": _torch_loss_with_metrics(token_losses, token_mask)[0]}


def _torch_metrics_and_pg_loss(token_losses, token_mask):
    metrics = _torch_metrics_and_loss(token_losses, token_mask)
    return {"tokens": metrics["tokens"], "pg_loss": metrics["loss"]}


@pytest.mark.parametrize("function, pick", [(_torch_loss_with_metrics, "[0]"), (_torch_metrics_and_loss, "['loss']"),
                                            (_torch_metrics_and_pg_loss, "['pg_loss']")])
def test_a_loss_returned_with_metrics_is_told_how_to_pick_it_out(function, pick):
    """A trainer's loss function that returns `(loss, metrics)` or a dict of them fails its structure, and the message
    shows the lambda that checks its loss; that lambda, checked as shown, conforms."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(function, framework="torch", reduction="token-mean", dtypes=["float32"], max_examples=5)
    assert {failure.kind for failure in report.failures} == {"wrong output structure"}, report.failures
    shown = f"`lambda token_losses, token_mask: fn(token_losses, token_mask){pick}`"
    assert all(shown in failure.message for failure in report.failures), report.failures
    picked = eval(shown.strip("`"), {"fn": function})  # the lambda as shown, its `fn` the function checked
    assert check(picked, framework="torch", reduction="token-mean", dtypes=["float32"], max_examples=5).ok


WRONG_STRUCTURES = """
import torch


def _loss(token_losses, token_mask):
    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    return selected.sum() / token_mask.sum().clamp(min=1)


def with_metrics(token_losses, token_mask):
    return _loss(token_losses, token_mask), {"tokens": token_mask.sum()}


def as_dict(token_losses, token_mask):
    return {"loss": _loss(token_losses, token_mask)}


def of_shape_one(token_losses, token_mask):
    return _loss(token_losses, token_mask).reshape(1)


def as_a_float(token_losses, token_mask):
    return _loss(token_losses, token_mask).item()


def chunk_of_shape_one(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    return (selected.sum() * dp_size / max(num_tokens, 1)).reshape(1)


def chunk_as_dict(token_losses, token_mask, **step):
    return {"loss": chunk_of_shape_one(token_losses, token_mask, **step).reshape(())}
"""


@pytest.mark.parametrize("function, accumulation", [
    ("with_metrics", False), ("as_dict", False), ("of_shape_one", False), ("as_a_float", False),
    ("chunk_of_shape_one", True), ("chunk_as_dict", True)])
def test_a_loss_of_the_wrong_structure_gets_snippets_that_fail_on_it(tmp_path, function, accumulation):
    """Whatever a loss (or a micro-batch's) was returned as, each cell's snippet (the gradient cells' too) fails with
    AssertionError on what was returned, not with an error of its own reading it."""
    from fuzz import check

    pytest.importorskip("torch")
    path = tmp_path / "structures.py"
    path.write_text(WRONG_STRUCTURES)
    report = check(f"{path}:{function}", framework="torch", reduction="token-mean", dtypes=["float32"],
                   max_examples=5, accumulation=accumulation)
    failing = [cell for cell in report.cells if not cell.ok]
    assert len(failing) == len(report.cells) and any("gradients" in cell.check for cell in failing), report.cells
    assert {failure.kind for failure in report.failures} == {"wrong output structure"}, report.failures
    # a forward cell's snippet and a gradient cell's (an engine's cells, one per split, have snippets alike)
    for failure in {"gradients" in failure.check: failure for failure in report.failures}.values():
        failed = _snippet_run(failure.snippet, tmp_path)
        assert failed.returncode != 0 and "loss " in failed.stderr.splitlines()[-1], (failure.kind,
                                                                                      failed.stderr[-2000:])
        assert failed.stderr.splitlines()[-1].startswith("AssertionError: "), failed.stderr[-2000:]


def _float64_loss_with_a_backward_that_raises(token_losses, token_mask):
    import torch

    class Raising(torch.autograd.Function):
        @staticmethod
        def forward(ctx, losses, mask):
            ctx.save_for_backward(mask)
            return torch.where(mask, losses.double(), 0).sum() / mask.sum().clamp(min=1)

        @staticmethod
        def backward(ctx, cotangent):
            raise ValueError("the backward's own bug")

    return Raising.apply(token_losses, token_mask)


def test_a_backward_that_raises_is_its_own_bug_beside_a_loss_of_the_wrong_dtype():
    """A wrong dtype (or device) cannot make the backward raise, as a wrong shape does: a backward that raises beside
    one is reported as what it raised, not hidden behind the forward's dtype."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_float64_loss_with_a_backward_that_raises, framework="torch", reduction="token-mean",
                   dtypes=["float32"], max_examples=5)
    kinds = {failure.check: failure.kind for failure in report.failures}
    assert kinds == {"forward": "wrong output structure", "gradients": "backward raised ValueError"}, kinds


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_loss_of_shape_one_is_told_how_to_pick_its_value_out(framework):
    """A loss reshaped to (1,) is a structure failure that shows the lambda indexing its one value, which, checked
    as shown, conforms."""
    from fuzz import check

    pytest.importorskip(framework)
    function = {"torch": _torch_loss_of_shape_one, "jax": _jax_loss_of_shape_one}[framework]
    report = check(function, framework=framework, reduction="token-mean", dtypes=["float32"], max_examples=5)
    shown = "`lambda token_losses, token_mask: fn(token_losses, token_mask)[0]`"
    assert report.failures and all(shown in failure.message for failure in report.failures), report.failures
    picked = eval(shown.strip("`"), {"fn": function})
    assert check(picked, framework=framework, reduction="token-mean", dtypes=["float32"], max_examples=5).ok


def _chunk_with_epsilon(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    import torch

    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    return (selected.sum() / (num_tokens + 1e-8) * dp_size).to(token_losses.dtype)  # NeMo-RL as shipped


def test_a_per_chunk_epsilon_is_named_as_one_not_as_float32_rounding():
    """A float64 combined loss off by an epsilon in the step's count is within float32's bound, as any slip that
    small is: the combination's own explanation is said instead."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_chunk_with_epsilon, framework="torch", reduction="token-mean", accumulation=True,
                   dtypes=["float64"], max_examples=5, gradients=False)
    messages = [failure.message for failure in report.failures]
    assert messages and all("an epsilon added to the token count" in message and "float32" not in message
                            for message in messages), messages


def _chunk_nonzero_when_empty(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    import torch

    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    nothing = 1e-30 if token_mask.shape[0] == 0 else 0.0  # far below the combined loss's tolerance
    return (selected.sum() / max(num_tokens, 1) * dp_size + nothing).to(token_losses.dtype)


def test_an_empty_chunks_snippet_fails_on_its_nonzero_loss(tmp_path):
    """A chunk without rows must give exactly 0: a loss of 1e-30 there is that failure alone (the combined loss is
    within tolerance), and its snippet asserts it, so it fails on it as the check did."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_chunk_nonzero_when_empty, framework="torch", reduction="token-mean", accumulation=True,
                   dtypes=["float32"], max_examples=20, gradients=False)
    failure = next(f for f in report.failures if f.kind == "empty chunk not exactly 0")
    assert {f.kind for f in report.failures} == {"empty chunk not exactly 0"}, report.failures
    path = tmp_path / "snippet.py"
    path.write_text(failure.snippet)
    run = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert run.returncode == 1 and "holds no rows" in run.stderr and "expected exactly 0" in run.stderr, run.stderr


def _chunk_over_its_padded_width(token_losses, token_mask, *, num_tokens, num_sequences, dp_size,
                                 accumulation_steps):
    import torch

    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    return (selected.sum() / (max(num_sequences, 1) * token_mask.shape[-1]) * dp_size).to(token_losses.dtype)


def test_a_non_finite_combined_loss_is_told_from_the_chunk_that_made_it():
    """L_max taken from a micro-batch's padded width: a chunk padded to its longest row, of fully masked rows, has
    width 0, and 0 / 0 makes the step's loss NaN. That NaN is told from the chunk's own inputs (a length read from
    its shape, 0 there), which the full batch, 4 x 7, does not show."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_chunk_over_its_padded_width, framework="torch", reduction="dr_grpo", l_max=1024.0,
                   accumulation=True, dtypes=["float32"], max_examples=20, gradients=False)
    said = [f.message for f in report.failures if f.kind == "non-finite output"]
    assert said and all(", from chunk " in message and "a length taken from the shape (the padded width, 0 here)"
                        in message for message in said), said


def _chunk_own_mean(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    import torch

    selected = torch.where(token_mask, token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)), 0)
    return (selected.sum() / token_mask.sum().clamp(min=1) * dp_size).to(token_losses.dtype)  # its own count


def test_a_combination_that_an_even_split_leaves_ambiguous_is_named_on_an_uneven_one():
    """Each micro-batch's own mean (its own count, num_tokens ignored): its shrunk case is an even split of rows with
    every token selected, where that is G times the step's loss, as a loss multiplied by G would be. The report
    names the one cause that the fixed case of rows of different counts, in chunks of different rows, leaves."""
    from fuzz import check

    pytest.importorskip("torch")
    report = check(_chunk_own_mean, framework="torch", reduction="token-mean", accumulation=True,
                   dtypes=["float32"], max_examples=20, gradients=False, fail_fast=True)
    said = [f.message for f in report.failures if f.kind == "loss out of tolerance"]
    assert said, report.failures
    for message in said:  # the last explanation said is the one left standing
        last = message.rpartition("where they give different values: ")[2]
        assert "a mean of micro-batch means?" in last and "; or " not in last, message
    assert any("in chunks of 1 and " in message for message in said), said
