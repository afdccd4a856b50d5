"""The loss reduction over micro-batches and data-parallel ranks: the per-chunk loss of a trainer's step, whose
combination over the step's R x G chunks must equal the full-batch loss (the gradient-accumulation invariant).

A step's batch is split over R data-parallel ranks and G accumulation steps per rank: R x G chunks of rows, of
any sizes (uneven, empty, only fully masked rows), each padded to its own width or to the step's. The function
under test is the per-chunk loss

    fn(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps) -> loss

called on each chunk with the step's global normalizers: num_tokens = N and num_sequences = D (as `rows`
declares) over the whole step, dp_size = R, accumulation_steps = G (Python ints), and the mode's L_max as
declared. Each chunk's loss is backpropagated, a rank's gradients are summed over its chunks, the ranks'
gradients are averaged (`dp_reduce="mean"`, DDP and FSDP) or summed (`"sum"`), and the backward may be scaled by
1/G (`backward_scale="1/G"`, DeepSpeed's and the HF Trainer's accumulation). The combined loss (the same
combination of the chunk losses) must equal the full-batch loss of the declared mode (reference/reduction.py),
and every token's combined gradient its full-batch gradient. An empty chunk gives exactly 0 and a zero gradient
that exists.

So the exact results are the reduction's, of the whole step: this contract differs in the calling convention,
which the engines own (fuzz/engines/), and in its tolerance, which allows what the combination adds: every chunk
rounds its own loss, and multiplies by its compensation (dp_size, or G).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from reference import reduction
from reference.case import Case
from reference.contract import ChunkedCall, Contract, Parameter
from reference.exact import exact_results
from reference.tolerance import CONTRACT, Precision

DP_REDUCE = ("mean", "sum")
BACKWARD_SCALE = ("1", "1/G")
# What combining the chunks adds to each path, in roundings in the input dtype: the chunk's compensation
# multiply (x dp_size, x G) and its own cast, forward; the same two and the ranks' mean (a division by R, in the
# gradient's dtype), backward.
COMBINATION_ROUNDINGS = 2
COMBINATION_BACKWARD_ROUNDINGS = 3


def tolerance(expected: reduction.Exact, dtype: str, precision: Precision = CONTRACT) -> dict[str, np.ndarray]:
    """The full-batch loss's bound with the combination's roundings: each chunk's row errors, batch sum (over at
    most B rows) and final roundings add up over the chunks to the full batch's (docs/tolerance.md). Each chunk
    that holds a selected token underflows on its own: at most one per non-empty row (an empty chunk is exactly
    0), whatever the split."""
    return reduction.tolerance(expected, dtype, precision, extra=COMBINATION_ROUNDINGS,
                               underflows=max(1, expected.nonempty))


def gradient_tolerance(gradients: reduction.Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                       precision: Precision = CONTRACT) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return reduction.gradient_tolerance(gradients, cotangents, dtype, precision, extra=COMBINATION_BACKWARD_ROUNDINGS)


def compensation(bound: Mapping[str, Any], dp_size: int, accumulation_steps: int) -> float:
    """What each chunk's loss is multiplied by so that the combination gives the full-batch loss: dp_size
    against the ranks' mean, G against a 1/G backward scale."""
    factor = float(dp_size) if ranks_averaged(bound) else 1.0
    return factor / step_scale(bound, accumulation_steps)


def step_keywords(case: Case, ranks: int, steps: int) -> dict[str, int]:
    """The step's global normalizers, given to every chunk: N and D counted over the whole step (D as `rows`
    declares), R and G."""
    expected = exact_results(case)
    return {"num_tokens": int(expected.counts.sum()), "num_sequences": int(expected.rows_divisor()),
            "dp_size": ranks, "accumulation_steps": steps}


def ranks_averaged(bound: Mapping[str, Any]) -> bool:
    return bound["dp_reduce"] == "mean"


def step_scale(bound: Mapping[str, Any], steps: int) -> float:
    return 1.0 / steps if bound["backward_scale"] == "1/G" else 1.0


def _chunk_results(chunks: Sequence[Case], bound: Mapping[str, Any]) -> list[reduction.Exact]:
    """Each chunk's exact results as its own batch."""
    values = chunks[0].contract.differentiable_inputs[0].name
    return [reduction.reference(chunk.values[values], chunk.mask, bound["mode"], bound["rows"], bound["l_max"])
            for chunk in chunks]


def _rank_losses(own: Sequence[reduction.Exact], bound: Mapping[str, Any], ranks: int, steps: int) -> list[float]:
    """Each rank's exact loss over its own G micro-batches as one batch, from the chunks' own results `own`
    (rank-major): its sums over the counts of that rank alone, N and D counted on the rank and not all-reduced
    over the ranks."""
    losses = []
    for rank in range(ranks):
        mine = own[rank * steps:(rank + 1) * steps]
        losses.append(reduction._loss(bound["mode"], math.fsum(e.total for e in mine),
                                      math.fsum(e.row_means for e in mine), sum(int(e.counts.sum()) for e in mine),
                                      sum(e.rows_divisor() for e in mine), bound["l_max"]))
    return losses


def _padded_width_losses(chunks: Sequence[Case], bound: Mapping[str, Any], divisor: int) -> list[float]:
    """Each chunk's exact share of the step's seq-mean-token-sum-norm with L_max its own padded width: its own
    batch's loss with that L_max, rescaled from its own D to the step's `divisor`."""
    values = chunks[0].contract.differentiable_inputs[0].name
    shares = []
    for chunk in chunks:
        own = reduction.reference(chunk.values[values], chunk.mask, bound["mode"], bound["rows"],
                                  max(chunk.shape[1], 1))
        shares.append(float(own.loss) * own.rows_divisor() / max(divisor, 1))
    return shares


def explain_combination(case: Case, chunks: Sequence[Case], ranks: int, steps: int, combined: float,
                        counts_its_own: bool = False) -> str | None:
    """The combined loss named by what it is off by, where one of the usual mistakes' exact values matches it: a
    mean of the chunks' own means, L_max from each chunk's padded width, a missing or doubled 1/G or dp_size, a
    per-row clamp(min=1) in the count, a share N / G (D / G) clamped at 1, an epsilon added to the step's count
    given; with `counts_its_own` (a rank form,
    which counts the step's tokens itself rather than being given them), each rank's own count, not all-reduced
    over the ranks."""
    expected = exact_results(case)
    exact = float(expected.loss)
    bound = case.contract.bound
    tol = float(case.contract.tolerance(expected, case.dtype)[reduction.LOSS])
    share = CONTRACT_CHUNKED.weight(bound, ranks, steps) * compensation(bound, ranks, steps)
    tokens = int(expected.counts.sum())
    own = _chunk_results(chunks, bound)
    own_means = sum(float(result.loss) for result in own)
    not_all_reduced = "not the step's all-reduced over the ranks"
    over_ranks = counts_its_own and ranks > 1
    own_count = ("does each micro-batch divide by its own token count (or rows)"
                 + (f", {not_all_reduced}" if over_ranks and steps == 1 else "") + ": a mean of micro-batch means?")
    candidates = [(share * own_means, own_count),
                  # the count a rank makes over its own G micro-batches, never all-reduced over the ranks (with
                  # G = 1 it is each micro-batch's own, the line above)
                  *([(share * sum(_rank_losses(own, bound, ranks, steps)),
                      f"does each rank divide by its own token count (or rows), {not_all_reduced}?")]
                    if over_ranks and steps > 1 else []),
                  # the form trainers ship: each chunk's own mean, nothing rescaled, averaged by the ranks and the
                  # 1/G (or summed and divided by G): the plain mean of the R x G micro-batches' means
                  (own_means / (ranks * steps),
                   "is each micro-batch's loss the mean over its own tokens (or rows), not rescaled: a mean of "
                   "per-micro-batch (per-rank) means?")]
    if bound["mode"] == reduction.SEQ_MEAN_TOKEN_SUM_NORM:
        candidates.append((share * sum(_padded_width_losses(chunks, bound, expected.rows_divisor())),
                           "is L_max taken from each chunk's padded width?"))
    candidates += [(exact * factor, text) for factor, text in _factors(ranks, steps, bound, own_count_said=True)]
    if bound["mode"] == reduction.TOKEN_MEAN:
        candidates += _positions_counted(case, own, share, exact, tokens)
    clamped = int(np.maximum(expected.counts, 1).sum())
    if bound["mode"] == reduction.TOKEN_MEAN and clamped != tokens and clamped:
        candidates.append((exact * tokens / clamped, f"= N / (N + {clamped - tokens} empty rows): a per-row "
                                                     "clamp(min=1) in the count?"))
    candidates += _share_clamp(bound, tokens, expected.rows_divisor(), steps, exact)
    candidates += _count_slips(expected, tokens)
    # every cause that fits, the likelier first: on an even split of equal rows a chunk's own mean and a
    # factor of R give the same value, and the report cannot tell them apart
    # a candidate's own rounding grows with its size: the tolerance of the exact value, scaled to the candidate's
    # and never for a combined loss nearer the exact one than the mistake's value
    causes = [text for value, text in candidates
              if abs(combined - value) <= 2 * tol * max(1.0, abs(value) / abs(exact) if exact else 1.0)
              + 1e-6 * abs(value) and abs(value - exact) > 2 * tol and abs(combined - value) < abs(combined - exact)]
    if not causes:
        return None
    return f"{off_by(combined, exact, ranks, steps)}: " + "; or ".join(causes)


def off_by(combined: float, exact: float, ranks: int, steps: int, name: str = reduction.LOSS) -> str:
    """What a combined output is against the full batch's exact one: the factor it is off by (or its value, where
    exactly 0 is expected), on which split."""
    ratio = f"{_ratio_text(combined / exact)}x" if exact else f"{combined:.6g} (exactly 0 expected)"
    return f"the combined {name} is {ratio} the full-batch {name} with R = {ranks}, G = {steps}"


def _positions_counted(case: Case, own: Sequence[reduction.Exact], share: float, exact: float, tokens: int
                       ) -> list[tuple[float, str]]:
    """A token-mean whose count is the positions, padding included (`token_mask.numel()`, a `.mean()` over every
    position): each micro-batch's own (its rows times its padded width), or the step's (B T)."""
    positions = [result.batch * result.tokens for result in own]
    own_positions = share * math.fsum(result.total / size for result, size in zip(own, positions) if size)
    step_positions = case.mask.size
    return [(own_positions, "does each micro-batch divide by its own positions, padding included (its rows times its "
                            "padded width: `token_mask.numel()`, or a `.mean()`), not by the step's tokens?"),
            *([(exact * tokens / step_positions, f"= N / (B T): is the step's count taken over all {step_positions} "
                                                 "positions, padding included (`numel()`, `.mean()`)?")]
              if step_positions else [])]


def _ratio_text(ratio: float) -> str:
    """A ratio to four digits, or to as many as tell it from 1 (a slip as small as an epsilon in a count is 1 to
    four digits, and to ten where the count is large: 17 tell any float from 1)."""
    return next(text for digits in (4, 10, 17) if (text := f"{ratio:.{digits}g}") != "1" or digits == 17)


def _count_slips(expected: reduction.Exact, tokens: int) -> list[tuple[float, str]]:
    """Each chunk divided by the step's count given to it with one of the reduction's own slips of a count, as
    combined values: an epsilon added (NeMo-RL's `global_valid_toks + 1e-8`: N, D or D L_max as the mode has it,
    each row's n_i), or the count kept in a half-precision dtype, as a model's compute dtype holds it (rounded
    there, or counted by ones until it sticks: 256 in bfloat16)."""
    divisor = expected.rows_divisor()
    found = (*reduction.epsilon_candidates(expected, tokens, divisor),
             *reduction.half_count_candidates(expected, tokens, divisor),
             *reduction.running_count_candidates(expected, tokens, divisor))
    return [(reduction.candidate_value(expected, weights), text) for text, weights in found]


def _share_clamp(declared: Mapping[str, Any], tokens: int, rows: int, steps: int, exact: float
                 ) -> list[tuple[float, str]]:
    """Under a 1/G backward scale each micro-batch divides by its share of the step's count, N / G (D / G for the
    row modes; OpenRLHF's window normalizer). Guarded with clamp(N / G, min=1), the share of a step with fewer
    tokens (rows) than micro-batches becomes 1: the loss is N / G times the exact one, and only there."""
    if declared["backward_scale"] != "1/G" or declared["mode"] == reduction.TOKEN_SUM:
        return []
    name, count = ("N", tokens) if declared["mode"] == reduction.TOKEN_MEAN else ("D", rows)
    if not 0 < count < steps:
        return []
    return [(exact * count / steps, f"{name} = {count} < G = {steps}: is the share {name} / G clamped at 1 "
                                    f"(clamp({name} / G, min=1))? Guard {name} itself, before dividing by G")]


def _factors(ranks: int, steps: int, declared: Mapping[str, Any], own_count_said: bool = False
             ) -> list[tuple[float, str]]:
    """The mistakes that scale the whole step by one factor, with what each says about the code under the declared
    combination (`dp_reduce`, `backward_scale`). A factor of G or R is also what each micro-batch's own count gives
    on an even split: said with it, unless `own_count_said` (the loss's explanation names that cause itself)."""
    own_count = "?" if own_count_said else ", or does each micro-batch divide by its own count?"
    if declared["backward_scale"] == "1/G":  # each chunk's loss must carry x G against the backward's 1/G
        times_g = f"G = {steps}: is the x G against the 1/G backward scale applied twice{own_count}"
        over_g = f"G = {steps}: is the x G against the declared 1/G backward scale missing, or 1/G applied twice?"
        # TRL's own division by G inside a loss that a trainer's 1/G backward scale divides again
        over_g_squared = (f"G = {steps}: is the x G against the declared 1/G backward scale missing and the loss "
                          "divided by G (accumulation_steps) as well, the 1/G applied twice over?")
    else:  # backward_scale=1: nothing rescales the micro-batches, and nothing in the loss should
        times_g = (f"G = {steps}: is the loss multiplied by G (accumulation_steps), where backward_scale=1 declares no "
                   f"1/G to make up for{own_count}")
        over_g = (f"G = {steps}: is the loss divided by G (accumulation_steps), where backward_scale=1 declares that "
                  "nothing rescales the micro-batches?")
        over_g_squared = f"G = {steps}: is the loss divided by G (accumulation_steps) twice?"
    averaged_count = "or its count (of tokens or rows) all-reduced with AVG where SUM is meant"
    if ranks_averaged(declared):  # each chunk's loss must carry x dp_size against the ranks' mean
        over_r = f"R = {ranks}: is dp_size missing (the ranks' mean divides by R again)?"
        times_r = f"R = {ranks}: is the loss multiplied by dp_size twice, {averaged_count}{own_count}"
    else:
        over_r = f"R = {ranks}: is the loss divided by dp_size, where dp_reduce=sum declares the gradients summed?"
        times_r = f"R = {ranks}: is dp_size applied where the gradients are summed, {averaged_count}{own_count}"
    return [(factor, text) for factor, text in ((steps, times_g), (1 / steps, over_g), (1 / ranks, over_r),
                                                (ranks, times_r), (1 / steps**2, over_g_squared)) if factor != 1]


def explain_gradient_factor(got: np.ndarray, want: np.ndarray, bound: np.ndarray, ranks: int, steps: int,
                            declared: Mapping[str, Any]) -> str | None:
    """A wrong combined gradient named by the factor it is off by, where it is the exact gradient times one of the
    factors a step's combination gets wrong (a missing or doubled 1/G or dp_size scales every token's gradient
    alike), within twice the gradient's tolerance scaled to that factor. Anything else (a chunk's own count weighs
    each chunk differently) is left unnamed: the single-process mistakes do not describe a step. `declared`: the
    contract's parameters, whose combination the causes are named in."""
    selected = want != 0
    if not selected.any() or not np.isfinite(got).all():
        return None
    ratio = float(np.median(got[selected] / want[selected]))
    causes = [text for factor, text in _factors(ranks, steps, declared)
              if np.all(np.abs(got - factor * want) <= 2 * bound * max(1.0, factor) + 1e-6 * np.abs(factor * want))]
    if not causes or np.all(np.abs(got - want) <= bound):
        return None
    return (f"the combined gradient is {ratio:.3g}x the full-batch gradient with R = {ranks}, G = {steps}: "
            + "; or ".join(causes))


CONTRACT_CHUNKED = ChunkedCall(step_keywords, ranks_averaged, step_scale, explain_combination,
                               explain_gradient_factor)


def _label(bound: dict[str, object]) -> str:
    reduce = reduction.CONTRACT.parameter_label or str
    mode_text = reduce({key: bound[key] for key in ("mode", "rows", "l_max")})
    return f"{mode_text}, dp_reduce={bound['dp_reduce']}, backward_scale={bound['backward_scale']}"


def _rules(bound: dict[str, object]) -> dict[str, object]:
    return reduction._parameter_rules(bound)


PARAMETERS = (
    *reduction.PARAMETERS,
    Parameter("dp_reduce", DP_REDUCE, "mean", "how the ranks' gradients combine: averaged (DDP, FSDP) or summed"),
    Parameter("backward_scale", BACKWARD_SCALE, "1",
              "what each chunk's backward is scaled by: 1 (gradients summed over the chunks) or 1/G (DeepSpeed, "
              "the HF Trainer)"),
)

# The campaign fuzzes the built-ins in every mode and convention, one drawn per example.
CAMPAIGN_PARAMETERS = tuple({**base, "dp_reduce": dp, "backward_scale": scale}
                            for base in reduction.CAMPAIGN_PARAMETERS for dp in DP_REDUCE for scale in BACKWARD_SCALE)

CONTRACT: Contract = replace(
    reduction.CONTRACT,
    name="accumulation",
    title="the loss reduction over micro-batches and data-parallel ranks",
    signature="fn(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps) -> loss",
    tolerance=tolerance,
    gradient_tolerance=gradient_tolerance,
    relations=(),  # the engines' splits are its metamorphic relation: every split must give the same loss
    parameters=PARAMETERS,
    parameter_rules=_rules,
    parameter_menu=CAMPAIGN_PARAMETERS,
    parameter_label=_label,
    explain=None,  # a wrong combination is named by CONTRACT_CHUNKED.explain, over the chunks
    explain_gradient=None,  # a wrong combined gradient by CONTRACT_CHUNKED.explain_gradient, which knows the split
    examples=reduction.EXAMPLES,  # a step of one chunk (R = G = 1) is the full batch
    chunked=CONTRACT_CHUNKED,
    keywords=("num_tokens", "num_sequences", "dp_size", "accumulation_steps"),
)
