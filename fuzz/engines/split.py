"""The Hypothesis strategy for a mesh and a split of a Case's rows and tokens over it, and the shards.

A mesh is (data, sequence): `data` ranks split the rows, `sequence` ranks split every row's tokens, and
rank (d, q) is global rank d * sequence + q. Splits are contiguous ranges: even, uneven (random cuts),
or with one empty shard; optionally one shard's tokens are all masked (the case's mask is cleared
there). With more than one sequence rank every row with tokens is split across ranks.

Which dimension of an input splits over which mesh axis is the contract's (`Input.mesh`): "data" splits
rows, "sequence" a row's tokens.

For shard_map, which needs equal shards, `pad_for_shard_map` pads every shard to the same size with masked
tokens (NaN per-token values, 0 under `--masked-values finite`) and fully masked rows (0 per-row values). By
the single-process contract this changes nothing: masked positions are ignored whatever they hold, and a fully
masked row contributes nothing (where D counts every row, the padded batch is judged: `JaxWorkerEngine.fit`).
The padded batch is what the function receives; the real rows and tokens are cut out and judged against the
exact results of the unpadded case (so padding never widens a tolerance), and every padded row's output and every
padded gradient must be exactly 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from fuzz.judge.draws import BOOLEANS, Draw, choice, integers
from reference.case import Case

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

    def active(self, case: Case) -> int:
        """How many ranks hold a selected token: where a split's collectives have something to carry."""
        return sum(bool(case.mask[self.rows(d), self.tokens(q)].any())
                   for d, q in (self.coordinates(rank) for rank in range(self.world)))

    def evenly(self, rows: int, tokens: int) -> Split:
        """The same mesh over a batch of `rows` x `tokens` cut into equal shards (shard_map's padded batch)."""
        return Split(self.data, self.sequence, tuple(range(0, rows + 1, rows // self.data)),
                     tuple(range(0, tokens + 1, tokens // self.sequence)))

    def describe(self, rank: int) -> str:
        d, q = self.coordinates(rank)
        rows, tokens = self.rows(d), self.tokens(q)
        return (f"rank {rank} (data {d}, sequence {q}; rows [{rows.start}, {rows.stop}), "
                f"tokens [{tokens.start}, {tokens.stop}))")


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
        mask = case.mask.copy()
        mask[split.rows(d), split.tokens(q)] = False
        case = case.with_(**{case.contract.mask.name: mask})
    return case, split


def _block(split: Split, rank: int, axes: tuple[str, ...]) -> tuple[slice, ...]:
    """The index of rank's block in an array whose dimensions split over `axes` ("data" rows, "sequence" tokens)."""
    d, q = split.coordinates(rank)
    return tuple(split.rows(d) if axis == "data" else split.tokens(q) for axis in axes)


def shard(case: Case, split: Split, rank: int) -> Case:
    """Rank's inputs as a Case of their own (contiguous, values as they are in the whole case)."""
    blocks = {spec.name: case.values[spec.name][_block(split, rank, spec.mesh)].copy() for spec in case.contract.inputs}
    return case.with_(layout="contiguous", **blocks)


def output_block(split: Split, rank: int, dims: tuple[str, ...]) -> tuple[slice, ...]:
    """The part of an output of dimensions `dims` that rank returns: its rows of a per-row output, all of a scalar."""
    d, _ = split.coordinates(rank)
    return tuple(split.rows(d) for dim in dims if dim == "batch")


# Padded shard sizes come from short menus: XLA compiles per shape (~0.2 s each), so a cell sees a few
# shapes many times. Never 0: XLA (jax 0.10) fails to compile shard_map over zero-size arrays ("expected at
# least one operand ... GlobalToLocalShape"), so an empty batch reaches shard_map as padding only.
ROWS_PER_SHARD = (32,)
TOKENS_PER_SHARD = (16, 512, 4096)


def padded_size(largest: int, menu: tuple[int, ...]) -> int:
    """`largest` rounded up to the menu (past it, to a power of two)."""
    return next((size for size in menu if size >= largest), 1 << max(largest - 1, 0).bit_length())


@dataclass(frozen=True)
class Padded:
    """The padded global case shard_map receives, and where each original row and token went."""

    case: Case
    row_index: np.ndarray  # padded row of each original row
    token_index: np.ndarray  # padded column of each original token

    def index(self, dims: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """Where an array of dimensions `dims` ("batch", "tokens") of the unpadded case sits in the padded one."""
        return np.ix_(*[self.row_index if dim == "batch" else self.token_index for dim in dims])

    def place(self, values: np.ndarray, dims: tuple[str, ...], fill: float | bool = 0.0) -> np.ndarray:
        """`values` of the unpadded case put where they went, `fill` elsewhere."""
        sizes = self.case.sizes
        out = np.full(tuple(sizes[dim] for dim in dims), fill, dtype=np.asarray(values).dtype)
        if dims:
            out[self.index(dims)] = values
            return out
        return np.asarray(values)

    def real(self, dims: tuple[str, ...]) -> np.ndarray:
        """True where an array of dimensions `dims` holds the unpadded case's values."""
        return self.place(np.ones(tuple(len(self.row_index if d == "batch" else self.token_index) for d in dims),
                                  bool), dims, False)


def padding_fill(masked_values: str) -> float:
    """What a masked token padded in holds: NaN, which correct code ignores like any masked value; 0 for code
    whose padding is finite by construction (`--masked-values finite`), as its domain says."""
    return 0.0 if masked_values == "finite" else np.nan


def pad_for_shard_map(case: Case, split: Split, fill: float = np.nan) -> Padded:
    """Every shard padded to one size (from the menus above): its real tokens first, then masked tokens (`fill`
    per token values: `padding_fill`'s); real rows first, then fully masked rows (0 per-row values). Uneven and
    empty shards stay uneven and empty in what they hold."""
    rows_per = padded_size(max(split.row_cuts[d + 1] - split.row_cuts[d] for d in range(split.data)),
                            ROWS_PER_SHARD)
    tokens_per = padded_size(max(split.token_cuts[q + 1] - split.token_cuts[q] for q in range(split.sequence)),
                              TOKENS_PER_SHARD)
    row_index = np.concatenate([d * rows_per + np.arange(split.rows(d).stop - split.rows(d).start)
                                for d in range(split.data)]).astype(np.int64)
    token_index = np.concatenate([q * tokens_per + np.arange(split.tokens(q).stop - split.tokens(q).start)
                                  for q in range(split.sequence)]).astype(np.int64)
    sizes = {"batch": split.data * rows_per, "tokens": split.sequence * tokens_per}
    values = {}
    for spec in case.contract.inputs:
        value = False if spec.kind == "bool" else (fill if spec.role == "tokens" else 0.0)
        padded = np.full(tuple(sizes[dim] for dim in spec.dims), value, dtype=case.values[spec.name].dtype)
        padded[np.ix_(*[row_index if dim == "batch" else token_index for dim in spec.dims])] = case.values[spec.name]
        values[spec.name] = padded
    return Padded(case.with_(**values), row_index, token_index)


def pad_cotangents(padded: Padded, cotangents: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cotangents of the real rows placed where those rows went; 0 for padded rows."""
    contract = padded.case.contract
    return {spec.name: padded.place(np.asarray(cotangents[spec.name], dtype=np.float64), spec.dims)
            for spec in contract.outputs}
