"""The Hypothesis strategy for a mesh and a split of a Case's rows and tokens over it.

A mesh is (data, sequence): `data` ranks split the rows, `sequence` ranks split every row's tokens, and
rank (d, q) is global rank d * sequence + q. Splits are contiguous ranges: even, uneven (random cuts),
or with one empty shard; optionally one shard's tokens are all masked (the case's mask is cleared
there). With more than one sequence rank every row with tokens is split across ranks.

For shard_map, which needs equal shards, `pad_for_shard_map` pads every shard to the same size with
masked tokens (NaN log-probs) and fully masked rows (advantage 0). By the single-process contract this
changes nothing: masked positions are ignored whatever they hold, and a fully masked row is exactly 0 and
adds 0 to N and D. The padded batch is what the function receives; the real rows and tokens are cut out
and judged against the reference of the unpadded case (so padding never widens a tolerance), and every
padded row and gradient must be exactly 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from fuzz.strategies import BOOLEANS, Draw, choice, integers
from impls.case import Case

MESHES: tuple[tuple[int, int], ...] = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))  # (data, sequence)
CUT_KINDS = ("even", "uneven", "one empty shard")


def mesh_name(mesh: tuple[int, int]) -> str:
    return f"{mesh[0]}x{mesh[1]}"


@dataclass(frozen=True)
class Split:
    """Rows [row_cuts[d], row_cuts[d + 1]) and tokens [token_cuts[q], token_cuts[q + 1]) on rank (d, q)."""

    data: int
    sequence: int
    row_cuts: tuple[int, ...]
    token_cuts: tuple[int, ...]

    @property
    def world(self) -> int:
        return self.data * self.sequence

    @property
    def mesh(self) -> tuple[int, int]:
        return self.data, self.sequence

    def coordinates(self, rank: int) -> tuple[int, int]:
        return divmod(rank, self.sequence)

    def rows(self, d: int) -> slice:
        return slice(self.row_cuts[d], self.row_cuts[d + 1])

    def tokens(self, q: int) -> slice:
        return slice(self.token_cuts[q], self.token_cuts[q + 1])

    def describe(self, rank: int) -> str:
        d, q = self.coordinates(rank)
        rows, tokens = self.rows(d), self.tokens(q)
        return (f"rank {rank} (data {d}, sequence {q}; rows [{rows.start}, {rows.stop}), "
                f"tokens [{tokens.start}, {tokens.stop}))")


@dataclass(frozen=True)
class Shard:
    """One rank's inputs, float64 values already rounded to the case's dtype."""

    token_log_probs: np.ndarray
    advantages: np.ndarray
    token_mask: np.ndarray


def _cuts(draw: Draw, size: int, parts: int, what: str) -> tuple[int, ...]:
    if parts == 1:
        return (0, size)
    kind = draw(choice(CUT_KINDS), f"{what} split")
    if kind == "uneven":
        inner = sorted(draw(st.lists(integers(0, size), min_size=parts - 1, max_size=parts - 1), f"{what} cuts"))
        return (0, *inner, size)
    even = [round(j * size / (parts - (kind != "even"))) for j in range(parts - (kind != "even") + 1)]
    if kind == "one empty shard":
        empty = draw(integers(0, parts - 1), f"empty {what} shard")
        even.insert(empty, even[empty])  # shard `empty` is [c, c)
    return tuple(even)


def draw_split(draw: Draw, case: Case, meshes: Sequence[tuple[int, int]] = MESHES) -> tuple[Case, Split]:
    """A mesh from `meshes` and a split of `case` over it; the case comes back with one shard's mask cleared
    when the draw says so. `draw(strategy, label)` is Hypothesis' draw with a label for the story."""
    data, sequence = draw(choice(tuple(meshes)), "mesh (data, sequence)")
    batch, tokens = case.shape
    split = Split(data, sequence, _cuts(draw, batch, data, "row"), _cuts(draw, tokens, sequence, "token"))
    if split.world > 1 and draw(BOOLEANS, "one shard all masked"):
        rank = draw(integers(0, split.world - 1), "all-masked rank")
        d, q = split.coordinates(rank)
        mask = case.token_mask.copy()
        mask[split.rows(d), split.tokens(q)] = False
        case = case.with_(token_mask=mask)
    return case, split


def shard(case: Case, split: Split, rank: int) -> Shard:
    d, q = split.coordinates(rank)
    rows, tokens = split.rows(d), split.tokens(q)
    return Shard(case.token_log_probs[rows, tokens].copy(), case.advantages[rows].copy(),
                 case.token_mask[rows, tokens].copy())


# Padded shard sizes come from short menus: XLA compiles per shape (~0.2 s each), so a cell sees a few
# shapes many times. Never 0: XLA (jax 0.10) fails to compile shard_map over zero-size arrays ("expected at
# least one operand ... GlobalToLocalShape"), so an empty batch reaches shard_map as padding only.
ROWS_PER_SHARD = (32,)
TOKENS_PER_SHARD = (16, 512, 4096)


def _padded_size(largest: int, menu: tuple[int, ...]) -> int:
    return next((size for size in menu if size >= largest), 1 << max(largest - 1, 0).bit_length())


@dataclass(frozen=True)
class Padded:
    """The padded global case shard_map receives, and where each original row and token went."""

    case: Case
    row_index: np.ndarray  # padded row of each original row
    token_index: np.ndarray  # padded column of each original token


def pad_for_shard_map(case: Case, split: Split) -> Padded:
    """Every shard padded to one size (from the menus above): its real tokens first, then masked NaN tokens;
    real rows first, then fully masked rows of advantage 0. Uneven and empty shards stay uneven and empty
    in what they hold."""
    batch, tokens = case.shape
    rows_per = _padded_size(max(split.row_cuts[d + 1] - split.row_cuts[d] for d in range(split.data)),
                            ROWS_PER_SHARD)
    tokens_per = _padded_size(max(split.token_cuts[q + 1] - split.token_cuts[q] for q in range(split.sequence)),
                              TOKENS_PER_SHARD)
    row_index = np.concatenate([d * rows_per + np.arange(split.rows(d).stop - split.rows(d).start)
                                for d in range(split.data)]).astype(np.int64)
    token_index = np.concatenate([q * tokens_per + np.arange(split.tokens(q).stop - split.tokens(q).start)
                                  for q in range(split.sequence)]).astype(np.int64)
    shape = (split.data * rows_per, split.sequence * tokens_per)
    log_probs = np.full(shape, np.nan)
    mask = np.zeros(shape, bool)
    advantages = np.zeros(shape[0])
    log_probs[np.ix_(row_index, token_index)] = case.token_log_probs
    mask[np.ix_(row_index, token_index)] = case.token_mask
    advantages[row_index] = case.advantages
    del batch, tokens
    padded = case.with_(token_log_probs=log_probs, advantages=advantages, token_mask=mask)
    return Padded(padded, row_index, token_index)


def pad_cotangents(padded: Padded, cotangents: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cotangents of the real rows placed where those rows went; 0 for padded rows."""
    batch = padded.case.shape[0]
    placed = {"magnitude_ratio": np.asarray(cotangents["magnitude_ratio"], dtype=np.float64)}
    for key in ("sequence_summed", "token_averaged"):
        placed[key] = np.zeros(batch)
        placed[key][padded.row_index] = cotangents[key]
    return placed
