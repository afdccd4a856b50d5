"""Fixed cases a gradient cell checks before Hypothesis draws any: the same two in every cell, at every seed.

A gradient cell has few examples (20 by default), and Hypothesis spends them on few distinct cases (the
first ones are its simplest choices, zero-extended; each generated case is followed by mutations of itself).
Two bugs of the backward need a particular case, and a 20-example cell met it in about one run of two:
a gradient cut from a value that only varies when rows hold different counts (a ratio of sums and of means, a
mean of row means), and a NaN or inf that only a zero count lets through a guarded division. The anchors are
those cases, checked as Hypothesis' explicit examples: every other draw of the example (values, layout,
cotangents, a split's cuts) takes its simplest value, so an anchor is the case Hypothesis itself starts from,
with its rows' counts named. Like an explicit example, an anchor that fails is reported as found (not shrunk:
it is small already) and the cell draws nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from fuzz.judge.draws import MIXED_LENGTHS, simplest


@dataclass(frozen=True)
class Anchor:
    """A fixed case, by the choices it names (draw label -> value); every other draw takes its simplest value."""

    name: str
    choices: Mapping[str, Any]


# 4 x 7, the sharded cells' simplest shape: rows to split over ranks or micro-batches. The fullest cotangent is
# the simplest one (every output's), so the gradient reaches every input.
GRADIENT_ANCHORS = (
    Anchor("rows of different counts, one of them 0",
           {"shape kind": "general", "batch": 4, "tokens": 7, "mask": MIXED_LENGTHS}),
    Anchor("nothing selected", {"shape kind": "general", "batch": 4, "tokens": 7, "mask": "all false"}),
)


class AnchorDraws:
    """Stands for Hypothesis' data object in an anchor's explicit example: `draw(strategy, label)` answers the
    anchor's choice for the label, else the strategy's simplest value."""

    def __init__(self, anchor: Anchor) -> None:
        self.anchor = anchor

    def draw(self, strategy: st.SearchStrategy, label: str | None = None) -> Any:
        if label in self.anchor.choices:
            return self.anchor.choices[label]
        return simplest(strategy, label or "unlabelled")

    def __repr__(self) -> str:
        return f"AnchorDraws({self.anchor.name!r})"
