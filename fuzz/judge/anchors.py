"""Fixed cases a cell checks besides Hypothesis' draws: the same in every cell that checks them, at every seed.

A cell has few examples (a gradient cell 20 by default), and Hypothesis spends them on few distinct cases (the
first ones are its simplest choices, zero-extended; each generated case is followed by mutations of itself).
Some bugs need a particular case, and a default run met it in about one run of two: a gradient cut from a value
that only varies when rows hold different counts (a ratio of sums and of means, a mean of row means); a NaN or
inf that only a zero count lets through a guarded division; a half-precision running sum or count, which only
drifts over rows of hundreds of selected tokens, or over thousands of rows. The fixed cases are those cases,
checked as Hypothesis' explicit examples (some only in some cells: `Anchor.checked_by`): every other draw of
the example (values, layout, cotangents, a split's cuts) takes its simplest value, so a fixed case is the case
Hypothesis itself starts from, with its shape and mask named. A failing fixed case is reported as it is (not
shrunk).

When: a gradient cell checks its fixed cases first (most backward bugs show on them, at once), and when one
fails draws nothing more, as after a failing explicit example. A forward cell's draws find most bugs and shrink
them to a minimal case, so its fixed cases run last, and only when the draws found nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from fuzz.judge.draws import MIXED_LENGTHS, simplest
from reference.contract import Contract


@dataclass(frozen=True)
class Anchor:
    """A fixed case, by the choices it names (draw label -> value); every other draw takes its simplest value.
    `one_sign_values`: each float input whose contract names a kind of values of one sign (ValueMenu.one_sign)
    draws that kind instead of its simplest. `dtypes`: the cells' dtypes that check it (empty: every one);
    `compiled`: whether a compiled subject's cells (jax.jit, torch.compile) check it."""

    name: str
    choices: Mapping[str, Any]
    one_sign_values: bool = False
    dtypes: tuple[str, ...] = ()
    compiled: bool = True

    def checked_by(self, dtype: str, compiled: bool) -> bool:
        return (not self.dtypes or dtype in self.dtypes) and (self.compiled or not compiled)


# 4 x 7, the sharded cells' simplest shape: rows to split over ranks or micro-batches. The fullest cotangent is
# the simplest one (every output's), so the gradient reaches every input.
MIXED_COUNTS = Anchor("rows of different counts, one of them 0",
                      {"shape kind": "general", "batch": 4, "tokens": 7, "mask": MIXED_LENGTHS})
NOTHING_SELECTED = Anchor("nothing selected", {"shape kind": "general", "batch": 4, "tokens": 7, "mask": "all false"})
# 1031 tokens, every one selected, off every vector width: a row's count past 256, where bfloat16 stops counting by
# ones (1031 is 1032 there), and the batch's, 3093, past 2048, where float16 does (3092 there); a row long enough
# for a half-precision running sum to stall. Values of one sign: a sum then grows with the row, so a count off by
# one part in a thousand is off by more than the sum's rounding, where values of both signs would cancel and hide it.
LONG_ROWS = Anchor("rows of 1031 tokens, every one selected",
                   {"shape kind": "one long row", "batch": 3, "tokens": 1031, "mask": "all true"},
                   one_sign_values=True)

# 4096 rows of 1 token, every one selected, values of one sign: a sum over the rows kept in half precision (a
# per-sample loop's running total, `total = total + row_loss` in the input dtype) stalls once the dtype's spacing at
# the total passes twice a row's value, after two to four thousand rows of equal values in float16 (256 to 512 in
# bfloat16), and drops a row of smaller values sooner. The draws' rows (at most 32, after "duplicate the batch")
# round such a total too few times for its error to show at most seeds. Only in half-precision cells (a float32 or
# float64 total over the rows is what the contract allows), and not for compiled code: jax.jit and torch.compile
# unroll a loop over the rows, and compiling 4096 (8192 for "duplicate the batch") iterations of it takes minutes,
# past a call's time limit, for code that is correct; the draws keep their rows few for the same reason.
MANY_ROWS = Anchor("4096 rows of 1 token, every one selected",
                   {"shape kind": "general", "batch": 4096, "tokens": 1, "mask": "all true"},
                   one_sign_values=True, dtypes=("float16", "bfloat16"), compiled=False)

# 64 rows of 1031 tokens, every one selected, in float16 gradient cells: a backward that forms a denominator in
# float16 (`n_i * B`, `B * L_max` for an L_max of 1024 or more, the batch's count N) overflows once it passes 65504
# (here 65984) and gives gradients of 0 where the exact ones, 1 / 65984, are subnormal but not 0. The draws' batches
# (at most 32 rows of 300 tokens, or a few long rows) keep every such product below 65504, and the forward's fixed
# cases do not reach a backward. After the draws, only where they found nothing; single-process cells only (a
# split's chunks are bucketed to at most 16 rows).
WIDE_HALF_BATCH = Anchor("64 rows of 1031 tokens, every one selected",
                         {"shape kind": "general", "batch": 64, "tokens": 1031, "mask": "all true"},
                         dtypes=("float16",))


@dataclass(frozen=True)
class FixedCases:
    """A cell's fixed cases: `first` before Hypothesis draws (a failure ends the cell), `last` after its draws,
    only when they found nothing."""

    first: tuple[Anchor, ...] = ()
    last: tuple[Anchor, ...] = ()


NO_FIXED_CASES = FixedCases()
GRADIENT_FIXED_CASES = FixedCases(first=(MIXED_COUNTS, NOTHING_SELECTED), last=(WIDE_HALF_BATCH,))
SPLIT_GRADIENT_FIXED_CASES = FixedCases(first=GRADIENT_FIXED_CASES.first)
FORWARD_FIXED_CASES = FixedCases(last=(LONG_ROWS, MANY_ROWS, MIXED_COUNTS, NOTHING_SELECTED))
# An engine's forward cells: the cases its draws keep away from. Their values of both signs hide a count kept in
# half precision (off by one part in 600 past 2048 tokens in bfloat16) under a float32 sum's allowance, and their
# rows are few; every split's draws start from the 4 x 7 batch and include empty and fully masked shards, and its
# gradient cells check the other two first.
SPLIT_FORWARD_FIXED_CASES = FixedCases(last=(LONG_ROWS, MANY_ROWS))


def fixed_cases(check: str, split: bool = False) -> FixedCases:
    """The fixed cases of a cell of `check` ("forward" or "gradients"); `split`: an engine's cell, whose examples
    each run a whole split (a fixed case's split takes its simplest draw: even cuts)."""
    if check == "gradients":
        return SPLIT_GRADIENT_FIXED_CASES if split else GRADIENT_FIXED_CASES
    return SPLIT_FORWARD_FIXED_CASES if split else FORWARD_FIXED_CASES


class AnchorDraws:
    """Stands for Hypothesis' data object in an anchor's explicit example: `draw(strategy, label)` answers the
    anchor's choice for the label (and, for an anchor of one-sign values, the one-sign kind of each of the
    contract's value menus, by the menu's label), else the strategy's simplest value."""

    def __init__(self, anchor: Anchor, contract: Contract) -> None:
        self.anchor = anchor
        menus = contract.domain.menus.values() if anchor.one_sign_values else ()
        self.choices = {**{menu.label: menu.one_sign for menu in menus if menu.one_sign is not None},
                        **anchor.choices}

    def draw(self, strategy: st.SearchStrategy, label: str | None = None) -> Any:
        if label in self.choices:
            return self.choices[label]
        return simplest(strategy, label or "unlabelled")

    def __repr__(self) -> str:
        return f"AnchorDraws({self.anchor.name!r})"
