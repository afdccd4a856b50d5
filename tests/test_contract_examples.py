"""Every built-in of every contract gives its contract's worked examples (the RLHF book's example for the
reductions: 2.35, 2.2, 1.65, 16.5, 33), in every dtype it has, on every device, within the strict tolerance of
the exact value; and the exact reference gives the examples' numbers."""

from __future__ import annotations

import numpy as np
import pytest

from impls import get_implementation
from reference.case import Case
from reference.contracts import CONTRACT_NAMES, get_contract
from reference.dtypes import numpy_dtype, round_to
from reference.exact import exact_results
from reference.tolerance import STRICT
from tests.conftest import in_process_builtins

CELLS = in_process_builtins()


def _case(contract, example, dtype: str, device: str) -> Case:
    bound = contract.bind(**example.parameters)
    values = {spec.name: np.array(example.inputs[spec.name], dtype=bool if spec.kind == "bool" else float)
              for spec in bound.inputs}
    return Case(contract=bound, dtype=dtype, device=device, **values)


@pytest.mark.parametrize("contract_name", CONTRACT_NAMES)
def test_the_exact_reference_gives_the_examples(contract_name):
    contract = get_contract(contract_name)
    assert contract.examples, f"the {contract_name} contract has no worked example"
    for example in contract.examples:
        exact = exact_results(_case(contract, example, "float64", "cpu")).outputs()
        for name, value in example.outputs.items():
            assert np.allclose(exact[name], value, rtol=1e-15, atol=0), (example.name, name, exact[name], value)


@pytest.mark.parametrize(("contract_name", "name"), CELLS)
def test_a_builtin_gives_its_contracts_examples(contract_name, name):
    contract = get_contract(contract_name)
    try:
        impl = get_implementation(name, contract_name)
    except RuntimeError as error:
        pytest.skip(str(error))
    checked = 0
    for device in impl.devices:
        if device not in impl.adapter.devices():
            continue
        for dtype in impl.dtypes:
            for example in contract.examples:
                case = _case(contract, example, dtype, device)
                keywords = case.contract.chunked.keywords(case, 1, 1) if case.contract.chunked else {}
                with impl.scope(case):
                    result = impl.function_for(case.contract)(*impl.adapter.materialize(case), **keywords)
                named = case.contract.outputs_of(result)
                assert named is not None, f"{example.name}: returned {type(result).__name__}"
                tolerance = case.contract.tolerance(exact_results(case), dtype, STRICT)
                for output, want in example.outputs.items():
                    got = impl.adapter.to_float64(named[output])
                    assert impl.adapter.dtype_of(named[output]) in case.contract.output_dtypes(dtype)
                    assert np.all(np.abs(got - np.asarray(want, dtype=float)) <= tolerance[output]), (
                        f"{name} {device} {dtype} {example.name}: {output} = {got.tolist()}, expected {want!r}")
                checked += 1
    assert checked



def test_a_wrong_loss_is_named_as_the_formula_it_equals():
    """The book's example, per-sequence (2.35) declared: 2.2 is token-mean's exact value, named as that mistake
    in the contract's terms; the declared value itself is never explained as a mistake."""
    from reference.reduction import explain

    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, per-sequence")
    case = _case(contract, example, "float32", "cpu")
    assert explain(case, {"loss": np.array(33 / 15)}) == (
        "it equals 2.2, the exact token-mean, where seq-mean-token-mean is declared?")
    assert explain(case, {"loss": np.array(2.35)}) is None


def test_a_fixed_length_loss_with_another_whole_constant_is_named_with_it():
    """Fixed length declared with L_max = 10: a loss divided by 1024 instead names 1024 as the constant in the
    code; a divisor no trainer writes as a length (1023) is not read off the value."""
    from reference.reduction import explain

    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, fixed-length")
    case = _case(contract, example, "float32", "cpu")
    assert explain(case, {"loss": np.array(33 / (2 * 1024))}) == (
        "it equals 0.0161133, the exact seq-mean-token-sum-norm with L_max = 1024, where L_max = 10 is declared: "
        "another constant in the code?")
    assert explain(case, {"loss": np.array(33 / (2 * 1023))}) is None
    assert explain(case, {"loss": np.array(1e-9)}) is None


def test_the_declared_modes_other_rows_convention_is_named_before_other_modes():
    """One selected token in one of two rows: rows="nonempty" where "all" is declared gives 3, as token-mean
    does; the slip of the declared mode comes first."""
    from reference.reduction import explain

    contract = get_contract("reduction", {"mode": "seq-mean-token-mean", "rows": "all"})
    case = Case(contract=contract, dtype="float32", token_losses=np.array([[3.0], [5.0]]),
                token_mask=np.array([[True], [False]]))
    text = explain(case, {"loss": np.array(3.0)})
    assert text.startswith(
        "it equals 3, the exact seq-mean-token-mean with D counting only the rows with a selected token: "
        "rows=nonempty, where rows=all is declared?; or ") and "the exact token-mean" in text


def test_rows_with_a_token_counted_on_each_ranks_slice_of_the_tokens_are_named():
    """seq-mean-token-mean, rows=nonempty, on a 1 x 2 mesh (tokens [0, 2) and [2, 4)): two rows hold tokens on both
    sequence ranks, one on the first only; counted on each slice and summed, D is 5 where it is 3."""
    from reference.reduction import explain_split, reference

    contract = get_contract("reduction", {"mode": "seq-mean-token-mean", "rows": "nonempty"})
    losses = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0], [2.0, 4.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    mask = np.array([[1, 1, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=bool)
    case = Case(contract=contract, dtype="float64", token_losses=losses, token_mask=mask)
    exact = reference(losses, mask, "seq-mean-token-mean", "nonempty", None)
    wrong = float(exact.row_means) / 5
    text = explain_split(case, (0, 4), (0, 2, 4), {"loss": np.array(wrong)})
    said = f"it equals {wrong:.6g}, D = B+ counted on each rank's own slice of the tokens"
    assert text and text.startswith(said), text
    # where no row holds tokens on two slices the count is right, and nothing is named so
    assert "each rank's own slice of the tokens and summed" not in (
        explain_split(case, (0, 4), (0, 4, 4), {"loss": np.array(wrong)}) or "")


def test_an_epsilon_in_a_float64_denominator_is_named_and_vanishes_from_the_hints_in_float32():
    """The book's example, per-token declared (N = 15): in float64 a loss of 33 / (15 + 1e-8) is the epsilon guard
    trainers write (NeMo-RL's masked_mean), named as that, not as float32 rounding; in float32 the epsilon rounds
    away, so the same formula is the declared value and nothing is read off it. Per-sequence declared, n_i + 1e-8
    and D + 1e-8 together (NeMo-RL's sequence level) are named as such."""
    from reference.reduction import explain

    per_token = get_contract("reduction", {"mode": "token-mean"})
    book = next(example for example in get_contract("reduction").examples
                if example.name == "the book's example, per-sequence")
    inputs = {name: np.asarray(value) for name, value in book.inputs.items()}
    case = Case(contract=per_token, dtype="float64", **inputs)
    assert explain(case, {"loss": np.array(33 / (15 + 1e-8))}) == (
        "it equals 2.2, the exact sum / (N + 1e-08): an epsilon added to the token count (clamp it to 1 instead)?")
    in_float32 = Case(contract=per_token, dtype="float32", **inputs)
    assert explain(in_float32, {"loss": np.array(33 / (15 + 1e-8))}) is None
    per_sequence = Case(contract=get_contract("reduction", {"mode": "seq-mean-token-mean"}), dtype="float64",
                        **inputs)
    guarded = (14 / (5 + 1e-8) + 19 / (10 + 1e-8)) / (2 + 1e-8)
    assert explain(per_sequence, {"loss": np.array(guarded)}).startswith(
        "it equals 2.35, the exact seq-mean-token-mean with n_i + 1e-08 and D + 1e-08: an epsilon added to every "
        "count")


def test_a_loss_nearer_the_declared_value_than_any_mistake_is_not_named_as_one():
    """bfloat16, one row of 1031 tokens, 700 selected (+64 and -64, summing to 128 x 64), token-mean declared: the
    contract's allowance s is wide, and the mean over all 1031 positions lies about 3 s from the exact loss. A
    loss 2 s from that mean but nearer the exact loss is nearly right, not that mistake (a value that fails only a
    strict tolerance there once read "it equals" the mean it was far from); the mean itself is still named."""
    from reference.reduction import explain

    contract = get_contract("reduction", {"mode": "token-mean"})
    losses, mask = np.full((1, 1031), -64.0), np.zeros((1, 1031), dtype=bool)
    losses[0, :414], losses[0, 700:], mask[0, :700] = 64.0, 0.0, True
    case = Case(contract=contract, dtype="bfloat16", token_losses=losses, token_mask=mask)
    expected = exact_results(case)
    exact, mean_over_all = float(expected.loss), float(expected.total) / 1031
    allowance = float(contract.tolerance(expected, "bfloat16")["loss"])
    assert 2 * allowance < exact - mean_over_all < 4 * allowance  # the window where the two rules differ
    nearly_right = mean_over_all + 2 * allowance
    assert explain(case, {"loss": np.array(nearly_right)}) is None
    assert "the mean over all 1x1031 positions" in explain(case, {"loss": np.array(mean_over_all)})


def test_a_token_count_kept_in_bfloat16_is_named():
    """1031 selected tokens: bfloat16 counts by twos past 256 and holds 1032, so sum / 1032 is a count kept in
    bfloat16 (a mask cast to a half-precision dtype and summed), named as that even in a float32 cell."""
    from reference.reduction import explain

    contract = get_contract("reduction", {"mode": "token-mean"})
    losses = (np.arange(1031.0) % 7 - 2).reshape(1, 1031)  # small integers, exact in every dtype
    case = Case(contract=contract, dtype="float32", token_losses=losses, token_mask=np.ones((1, 1031), dtype=bool))
    total = float(exact_results(case).total)
    assert "N = 1031 rounded to bfloat16: the token count kept in bfloat16" in explain(
        case, {"loss": np.array(total / 1032)})


def test_a_trainers_spelling_carries_its_rows_convention_unless_rows_is_declared():
    """tunix's sequence-mean-token-mean divides by the rows with a selected token: its spelling means
    rows="nonempty" where rows is left undeclared (the check's declaration, the contract, every built-in), and a
    declared rows wins; verl's seq-mean-token-mean keeps the book's every row."""
    from fuzz.run.subjects import declared_contract
    from impls.array_api_reduction import loss_reduction as array_api_reduction
    from impls.numpy_reduction import loss_reduction as numpy_reduction

    tunix = "sequence-mean-token-mean"
    assert get_contract("reduction", {"mode": tunix}).bound["rows"] == "nonempty"
    assert get_contract("reduction", {"mode": tunix, "rows": None}).bound["rows"] == "nonempty"
    assert get_contract("reduction", {"mode": tunix, "rows": "all"}).bound["rows"] == "all"
    assert get_contract("reduction", {"mode": "seq-mean-token-mean"}).bound["rows"] == "all"
    assert get_contract("accumulation", {"mode": tunix}).bound["rows"] == "nonempty"
    assert declared_contract(tunix)[1]["rows"] == "nonempty"
    with pytest.raises(ValueError, match="mode must be one of"):  # None is no mode: only rows and l_max may be None
        get_contract("reduction", {"mode": None})
    assert declared_contract(tunix, rows="all")[1]["rows"] == "all"
    losses, mask = np.array([[1.0, 3.0], [5.0, 7.0]]), np.array([[True, True], [False, False]])
    for reduce in (numpy_reduction, array_api_reduction):
        assert float(reduce(losses, mask, mode=tunix)) == 2.0
        assert float(reduce(losses, mask, mode=tunix, rows="all")) == 1.0
        assert float(reduce(losses, mask, mode="seq-mean-token-mean")) == 1.0


def test_each_ranks_own_count_is_a_cause_only_where_the_function_counts_for_itself():
    """R = 2, G = 2, each rank's second micro-batch empty: each micro-batch's own count and each rank's give the
    same wrong loss. Only a rank form counts the step's tokens itself (and can leave its count un-reduced); the
    in-process form is given the step's counts, so there the rank's own count is no cause to name."""
    from reference.accumulation import explain_combination

    contract = get_contract("accumulation", {"mode": "token-mean"})
    losses = np.array([[1.0, 2.0], [9.0, 9.0], [3.0, 4.0], [9.0, 9.0]])
    mask = np.array([[True, True], [False, False], [True, True], [False, False]])
    case = Case(contract=contract, dtype="float64", token_losses=losses, token_mask=mask)
    chunks = [Case(contract=contract, dtype="float64", token_losses=losses[k:k + 1], token_mask=mask[k:k + 1])
              for k in range(4)]  # rank-major: rank 0 holds chunks 0 and 1
    own_means = 3 / 2 + 7 / 2  # each non-empty micro-batch's own mean, x dp_size against the ranks' mean
    rank_form = explain_combination(case, chunks, 2, 2, own_means, counts_its_own=True)
    in_process = explain_combination(case, chunks, 2, 2, own_means)
    assert "does each rank divide by its own token count (or rows), not the step's all-reduced" in rank_form
    assert "mean of micro-batch means" in in_process and "does each rank" not in in_process


def test_a_share_of_the_count_clamped_at_one_is_named_where_the_step_has_fewer_tokens_than_micro_batches():
    """OpenRLHF's window normalizer N / G guarded with clamp(min=1): with N = 2 tokens over G = 4 micro-batches
    (1/G backward scale) each micro-batch divides by 1, not 1/2, and the combined loss is N / G = 1/2 the exact one,
    which no factor of G or R gives. With N >= G the clamp changes nothing and is not offered."""
    from reference.accumulation import explain_combination

    contract = get_contract("accumulation", {"mode": "token-mean", "backward_scale": "1/G"})
    losses = np.array([[1.0, 9.0], [3.0, 9.0], [9.0, 9.0], [9.0, 9.0]])
    mask = np.array([[True, False], [True, False], [False, False], [False, False]])
    case = Case(contract=contract, dtype="float64", token_losses=losses, token_mask=mask)
    chunks = [Case(contract=contract, dtype="float64", token_losses=losses[k:k + 1], token_mask=mask[k:k + 1])
              for k in range(4)]
    clamp = "is the share N / G clamped at 1 (clamp(N / G, min=1))?"
    assert clamp in explain_combination(case, chunks, 1, 4, 2.0 * 2 / 4)  # exact loss 2, times N / G
    everything = np.ones_like(mask)
    full = case.with_(token_mask=everything)
    full_chunks = [chunk.with_(token_mask=everything[k:k + 1]) for k, chunk in enumerate(chunks)]
    quartered = explain_combination(full, full_chunks, 1, 4, 7.25 / 4)  # N = 8 >= G: 1/G applied twice, no clamp
    assert "1/G applied twice" in quartered and clamp not in quartered


def test_a_step_count_kept_in_half_precision_and_1_over_g_twice_over_are_named():
    """Causes a new user's micro-batch losses showed unnamed: the step's N held as a bfloat16 tensor (845 rounds to
    844, a model's compute dtype), counted one token at a time in bfloat16 (it sticks at 256), and TRL's own 1/G
    inside a loss a declared 1/G backward scale divides again, without the x G (1/G^2 of the exact loss)."""
    from reference.accumulation import explain_combination

    rng = np.random.default_rng(4)
    losses = round_to(rng.uniform(1, 2, (5, 169)), "float32")
    mask = np.ones_like(losses, bool)  # N = 845
    for backward_scale, combined, said in [
            ("1", lambda exact: exact * 845 / 844, "N = 845 rounded to bfloat16: the token count kept in bfloat16"),
            ("1", lambda exact: exact * 845 / 256, "N = 845 counted one token at a time in bfloat16, which sticks"),
            ("1/G", lambda exact: exact / 4, "missing and the loss divided by G (accumulation_steps) as well")]:
        contract = get_contract("accumulation", {"mode": "token-mean", "backward_scale": backward_scale})
        case = Case(contract=contract, dtype="float32", token_losses=losses, token_mask=mask)
        chunks = [case.with_(token_losses=losses[rows], token_mask=mask[rows]) for rows in (slice(0, 2), slice(2, 5))]
        exact = float(exact_results(case).loss)
        assert said in (explain_combination(case, chunks, 1, 2, combined(exact)) or ""), said


def test_a_combined_loss_no_cause_matches_is_still_told_by_its_factor():
    """A combined loss off by 1.37, which no usual mistake gives: the message says the factor, without a cause."""
    from fuzz.engines.chunks import ChunkSplit, judge_combined
    from reference.tolerance import CONTRACT

    contract = get_contract("accumulation", {"mode": "token-mean"})
    losses, mask = np.array([[1.0, 2.0], [3.0, 4.0]]), np.ones((2, 2), bool)
    case = Case(contract=contract, dtype="float64", token_losses=losses, token_mask=mask)
    split = ChunkSplit(ranks=1, steps=2, cuts=(0, 1, 2), widths=(2, 2))
    verdict = judge_combined(case, split, 2.5 * 1.37, "float64", CONTRACT, [1.0, 2.4])
    assert [f.hint for f in verdict.failures] == [None]
    assert verdict.failures[0].message.endswith("the combined loss is 1.37x the full-batch loss with R = 1, G = 2")


@pytest.mark.parametrize(("mode", "said"), [
    ("token-mean", "the exact sum / (N + 1e-08): an epsilon added to the token count"),
    ("seq-mean-token-mean", "the exact seq-mean-token-mean with D + 1e-08: an epsilon added to the row count"),
])
def test_an_epsilon_added_to_the_steps_count_is_named(mode, said):
    """NeMo-RL's `/ (global_valid_toks + 1e-8)`: in float64 the combined loss is off by a part in 10^9, named as
    the epsilon, with the ratio shown to the digits that differ from 1."""
    from reference.accumulation import explain_combination

    contract = get_contract("accumulation", {"mode": mode})
    losses = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]])
    mask = np.array([[True, True, True], [True, False, False]])
    case = Case(contract=contract, dtype="float64", token_losses=losses, token_mask=mask)
    chunks = [case.with_(token_losses=losses[k:k + 1], token_mask=mask[k:k + 1]) for k in range(2)]
    exact = 10 / 4 if mode == "token-mean" else (7 / 3 + 3) / 2
    count = 4 if mode == "token-mean" else 2
    said_here = explain_combination(case, chunks, 1, 2, exact * count / (count + 1e-8))
    assert said_here is not None and said in said_here and f"{count / (count + 1e-8):.10g}x" in said_here, said_here
    assert explain_combination(case, chunks, 1, 2, exact) is None
    if mode == "token-mean":  # N = 4096: the slip is 1 to ten digits too, shown to as many as tell it from 1
        ones = np.ones((2, 2048), dtype=bool)
        wide = case.with_(token_losses=np.arange(4096.0).reshape(2, 2048) / 1024, token_mask=ones)
        halves = [wide.with_(token_losses=wide.token_losses[k:k + 1], token_mask=ones[k:k + 1]) for k in range(2)]
        exact = float(np.arange(4096.0).sum() / 1024) / 4096
        said_wide = explain_combination(wide, halves, 1, 2, exact * 4096 / (4096 + 1e-8))
        assert said_wide is not None and f"{4096 / (4096 + 1e-8):.17g}x" in said_wide, said_wide


def _near_token_mean_case(seed: int) -> Case:
    """Per-sequence declared, bfloat16, 4 rows of 23 tokens, about 60% selected: token-mean's exact loss lies
    within a few contract tolerances of the declared one (seed 0), or its weights do (seed 30: counts 15, 15, 15,
    16)."""
    rng = np.random.default_rng(seed)
    mask = rng.random((4, 23)) < 0.6
    losses = round_to(rng.uniform(-2.0, 2.0, mask.shape), "bfloat16")
    contract = get_contract("reduction", {"mode": "seq-mean-token-mean", "rows": "all"})
    return Case(contract=contract, dtype="bfloat16", token_losses=losses, token_mask=mask)


def test_a_loss_the_contract_precision_accepts_is_never_named_as_a_mistake():
    """Under --precision strict a bfloat16 loss may fail while within the contract's tolerance: rounding, not a
    formula, so no mistake is named there, even one nearer the value than the declared mode's exact loss is; at
    that mistake's own value it is named."""
    from reference.reduction import explain, tolerance

    case = _near_token_mean_case(0)
    expected = exact_results(case)
    scale = float(tolerance(expected, "bfloat16")["loss"])
    token_mean = float(expected.total) / int(case.token_mask.sum())
    near = float(expected.loss) + np.clip(token_mean - float(expected.loss), -0.95 * scale, 0.95 * scale)
    assert abs(token_mean - float(expected.loss)) > scale  # a mistake the contract itself would reject
    assert explain(case, {"loss": np.array(near)}) is None
    assert "the exact token-mean, where seq-mean-token-mean is declared?" in explain(
        case, {"loss": np.array(token_mean)})


def test_a_gradient_the_contract_precision_accepts_is_never_named_as_a_mistake():
    """As for the loss: a bfloat16 gradient within the contract's tolerance of the exact one, moved toward
    token-mean's weights, is not explained; token-mean's weights themselves are."""
    from reference.reduction import case_vjp, explain_gradient, gradient_tolerance

    case = _near_token_mean_case(30)
    mask, cotangents = case.token_mask, {"loss": np.array(1.0)}
    exact = case_vjp(case, cotangents)
    bound = gradient_tolerance(exact, cotangents, "bfloat16")["token_losses"][0]
    token_mean = np.where(mask, 1.0 / mask.sum(), 0.0)
    near = np.where(mask, exact.token_losses + np.clip(token_mean - exact.token_losses, -0.95 * bound,
                                                       0.95 * bound), 0.0)
    assert (np.abs(token_mean - exact.token_losses) > bound).any()
    assert explain_gradient(case, cotangents, {"token_losses": near}) is None
    assert explain_gradient(case, cotangents, {"token_losses": token_mean}) == (
        "it is the gradient of the exact token-mean, where seq-mean-token-mean is declared?")


def test_a_bfloat16_fixed_length_gradient_names_its_constant_through_its_rounding():
    """Fixed length declared with L_max = 10, bfloat16: a backward dividing by D 1024 gives c / 2048 rounded to
    bfloat16, which reads as L_max = 1020 to 1028; the length constant nearest it is named."""
    from reference.reduction import explain_gradient

    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, fixed-length")
    case = _case(contract, example, "bfloat16", "cpu")
    cotangents = {"loss": np.array(0.7)}
    gradient = np.where(case.token_mask, round_to(np.array(0.7 / (2 * 1024)), "bfloat16"), 0.0)
    assert float(gradient.max()) != 0.7 / 2048  # rounded: 1/(D w) is not 1024
    assert explain_gradient(case, cotangents, {"token_losses": gradient}) == (
        "it is the gradient of the exact seq-mean-token-sum-norm with L_max = 1024, where L_max = 10 is declared: "
        "another constant in the code?")


def test_a_value_off_by_another_factor_names_no_length_constant():
    """Fixed length declared: a bfloat16 gradient 0.6 times the right one reads as L_max = 1667, and a float32
    loss divided by 1023 as 1023, numbers no trainer writes as a length: neither is rounded to a nearby constant
    (1700, 1024) beyond what the value's own rounding can move it."""
    from reference.reduction import explain, explain_gradient

    declared = get_contract("reduction", {"mode": "seq-mean-token-sum-norm", "l_max": 1000})
    one = Case(contract=declared, dtype="bfloat16", token_losses=np.array([[1.0]]), token_mask=np.array([[True]]))
    gradient = round_to(np.array([[0.6 / 1000]]), "bfloat16")
    assert explain_gradient(one, {"loss": np.array(1.0)}, {"token_losses": gradient}) is None
    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, fixed-length")
    case = _case(contract, example, "float32", "cpu")
    assert explain(case, {"loss": np.array(33 / (2 * 1023))}) is None
    assert "L_max = 1024" in explain(case, {"loss": np.array(33 / (2 * 1024))})


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_a_running_count_kept_in_half_precision_is_named_where_it_sticks(mode):
    """One row of 300 selected tokens, each -1, in bfloat16: a count by ones kept in bfloat16 sticks at 256, so
    the loss is -300/256 = -1.171875 and every token's gradient c/256; both are named as that count."""
    from reference.reduction import explain, explain_gradient

    contract = get_contract("reduction", {"mode": mode})
    case = Case(contract=contract, dtype="bfloat16", token_losses=-np.ones((1, 300)),
                token_mask=np.ones((1, 300), bool))
    named = "counted one token at a time in bfloat16, which sticks at 256: a running count kept in bfloat16?"
    assert named in explain(case, {"loss": np.array(-300 / 256)})
    assert named in explain_gradient(case, {"loss": np.array(1.0)}, {"token_losses": np.full((1, 300), 1 / 256)})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_sum_kept_in_half_precision_is_named(dtype):
    """One row of 2048 selected tokens of 0.1 (rounded to the dtype): a running sum in bfloat16 sticks at 32 (each
    0.1 under half an ulp there), and in float16 drifts to 236 against 204.75; the loss from that sum is named so.
    The exact loss, and a float32 case's, name nothing of the kind."""
    from reference.reduction import explain

    contract = get_contract("reduction", {"mode": "token-mean"})
    losses = round_to(np.full((1, 2048), 0.1), dtype)
    case = Case(contract=contract, dtype=dtype, token_losses=losses, token_mask=np.ones((1, 2048), bool))
    running = float(np.cumsum(losses.astype(numpy_dtype(dtype)))[-1]) / 2048
    named = (f"the exact token-mean from each row's sum accumulated in {dtype} one token at a time: a sum kept in "
             f"{dtype}, the input dtype (accumulate in float32 or wider)?")
    assert named in explain(case, {"loss": np.array(running)})
    assert explain(case, {"loss": np.array(float(losses.sum()) / 2048)}) is None
    wide = Case(contract=contract, dtype="float32", token_losses=round_to(losses, "float32"),
                token_mask=case.token_mask)
    assert "accumulated in" not in (explain(wide, {"loss": np.array(running)}) or "")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_count_off_by_one_is_named_before_another_mode(dtype):
    """The book's example: a token mean over 16 tokens for its 15, and per-sequence means over 6 and 11, are named
    as counts off by one, first, in float32 and in bfloat16 (where another mode may lie within its allowance)."""
    from reference.reduction import explain

    contract = get_contract("reduction")
    for name, wrong, named in [("per-token", 33 / 16, "the exact sum / 16, N + 1: the token count off by one?"),
                               ("per-sequence", (14 / 6 + 19 / 11) / 2, "the exact seq-mean-token-mean with each "
                                                                         "row's n_i + 1: the rows' token counts off by "
                                                                         "one?")]:
        example = next(example for example in contract.examples if example.name == f"the book's example, {name}")
        said = explain(_case(contract, example, dtype, "cpu"), {"loss": np.array(wrong)})
        assert said is not None and said.split(", ", 1)[1].startswith(named), said


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_count_off_by_one_is_never_named_a_sum_kept_in_half_precision(dtype):
    """T / (N + 1), T / (N - 1) and a dropped token lower a loss's magnitude by about as much as a running sum in
    bfloat16 or float16 can: on log-prob-like batches they are never named as that sum (its candidates are held to
    the few roundings after exact sums)."""
    from reference.reduction import explain

    rng, contract = np.random.default_rng(1), get_contract("reduction", {"mode": "token-mean"})
    for _ in range(80):
        batch, tokens = int(rng.integers(1, 4)), int(rng.integers(2, 300))
        losses = round_to(-rng.exponential(rng.choice([0.05, 1.0, 8.0]), (batch, tokens)), dtype)
        mask = rng.random((batch, tokens)) < rng.uniform(0.3, 1)
        if mask.sum() < 2:
            continue
        case = Case(contract=contract, dtype=dtype, token_losses=losses, token_mask=mask)
        total, count = float(exact_results(case).total), int(mask.sum())
        for wrong in (total / (count + 1), total / (count - 1), (total - float(losses[mask][-1])) / count):
            assert "a sum kept in" not in (explain(case, {"loss": np.array(wrong)}) or "")


def test_a_wrong_gradient_is_named_as_the_formula_whose_gradient_it_is():
    """The book's example, per-sequence declared: a backward that gives every selected token c / N (token-mean's
    weights) is named as that mistake; the declared mode's own gradient, and a gradient not 0 at a masked
    position (reported as what it is), are not explained."""
    from reference.reduction import case_vjp, explain_gradient

    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, per-sequence")
    case = _case(contract, example, "float32", "cpu")
    cotangents = {"loss": np.array(0.75)}
    mask = case.token_mask
    token_mean = np.where(mask, 0.75 / 15, 0.0)
    assert explain_gradient(case, cotangents, {"token_losses": token_mean}) == (
        "it is the gradient of the exact token-mean, where seq-mean-token-mean is declared?")
    right = case_vjp(case, cotangents).token_losses
    assert explain_gradient(case, cotangents, {"token_losses": right}) is None
    assert explain_gradient(case, cotangents, {"token_losses": np.where(mask, 0.75 / 15, 1.0)}) is None


def test_a_fixed_length_gradient_with_another_whole_constant_is_named_with_it():
    """Fixed length declared with L_max = 10: a backward dividing by D 1024 names 1024 as the constant in the code,
    as a loss divided by it does."""
    from reference.reduction import explain_gradient

    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, fixed-length")
    case = _case(contract, example, "float64", "cpu")
    cotangents = {"loss": np.array(-2.0)}
    gradient = np.where(case.token_mask, -2.0 / (2 * 1024), 0.0)
    assert explain_gradient(case, cotangents, {"token_losses": gradient}) == (
        "it is the gradient of the exact seq-mean-token-sum-norm with L_max = 1024, where L_max = 10 is declared: "
        "another constant in the code?")


def test_fixed_length_without_its_l_max_is_named_even_where_a_single_token_makes_mistakes_coincide():
    """Fixed length declared: a loss that is sum / D (L_max left out, as tunix's default norm of B leaves it) is
    named so first on the book's example (L_max = 10), and among the first named on a batch of one selected token
    (L_max = 64), the minimal case Hypothesis shrinks to, where the padded width (1) and the mean over every
    position equal it too."""
    from reference.reduction import explain

    contract = get_contract("reduction", {"mode": "seq-mean-token-sum-norm", "l_max": 64})
    left_out = "the exact seq-mean-token-sum (rows=all), sum / D alone: L_max left out, or the wrong mode declared?"
    example = next(example for example in contract.examples if example.name == "the book's example, fixed-length")
    book = _case(contract, example, "float64", "cpu")
    assert explain(book, {"loss": np.array(16.5)}).startswith(f"it equals 16.5, {left_out}")
    one = Case(contract=contract, dtype="float32", token_losses=np.array([[0.75]]), token_mask=np.array([[True]]))
    assert left_out in explain(one, {"loss": np.array(0.75)})


def test_a_per_sequence_mean_without_its_one_over_d_is_named_in_the_loss_and_the_gradient():
    """The book's example, per-sequence declared (B = 2): the rows' means summed, 4.7, and a backward that gives
    c / n_i, are both named as the missing 1/D."""
    from reference.reduction import explain, explain_gradient

    contract = get_contract("reduction")
    example = next(example for example in contract.examples if example.name == "the book's example, per-sequence")
    case = _case(contract, example, "float32", "cpu")
    assert explain(case, {"loss": np.array(4.7)}) == (
        "it equals 4.7, the rows' means summed without the 1/D: the mean over the rows left out?")
    counts = case.token_mask.sum(-1, keepdims=True)
    gradient = np.where(case.token_mask, 1.0 / counts, 0.0)
    assert explain_gradient(case, {"loss": np.array(1.0)}, {"token_losses": gradient}) == (
        "it is the gradient of the rows' means summed without the 1/D: the mean over the rows left out?")


def test_a_combined_gradient_off_by_a_factor_of_the_split_is_named_by_it():
    """Every token's gradient halved with R = 2 is the ranks' mean dividing by R again; a right gradient, and one that
    is off by different amounts on different tokens, are not named."""
    from reference.accumulation import explain_gradient_factor

    want = np.array([[0.25, 0.25, 0.0], [0.5, 0.0, 0.0]])
    bound = np.where(want != 0, 1e-7, 0.0)
    ddp = {"dp_reduce": "mean", "backward_scale": "1"}
    assert explain_gradient_factor(want / 2, want, bound, 2, 1, ddp) == (
        "the combined gradient is 0.5x the full-batch gradient with R = 2, G = 1: R = 2: is dp_size missing (the "
        "ranks' mean divides by R again)?")
    assert explain_gradient_factor(want, want, bound, 2, 1, ddp) is None
    assert explain_gradient_factor(want * np.array([[0.5], [1.0]]), want, bound, 2, 1, ddp) is None
    assert explain_gradient_factor(want * 2, want, bound, 1, 2, ddp).startswith(
        "the combined gradient is 2x the full-batch gradient with R = 1, G = 2: G = 2: is the loss multiplied by G")


@pytest.mark.parametrize(("declared", "cause"), [
    ({"dp_reduce": "mean", "backward_scale": "1/G"},
     "G = 2: is the x G against the declared 1/G backward scale missing, or 1/G applied twice?"),
    ({"dp_reduce": "mean", "backward_scale": "1"},
     "G = 2: is the loss divided by G (accumulation_steps), where backward_scale=1 declares that nothing rescales "
     "the micro-batches?"),
])
def test_a_factor_of_one_over_g_is_named_in_the_declared_backward_scale(declared, cause):
    """A step's gradient halved with G = 2 is a 1/G applied twice only where the trainer's backward scale is 1/G;
    under backward_scale=1 nothing else divides by G, so it is the loss's own division."""
    from reference.accumulation import explain_gradient_factor

    want = np.array([[0.25, 0.25], [0.5, 0.0]])
    bound = np.where(want != 0, 1e-7, 0.0)
    assert explain_gradient_factor(want / 2, want, bound, 1, 2, declared) == (
        f"the combined gradient is 0.5x the full-batch gradient with R = 1, G = 2: {cause}")
