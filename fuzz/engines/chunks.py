"""A step's batch split over R data-parallel ranks and G accumulation steps: the Hypothesis strategy for the
R x G chunks of rows, and the chunks themselves.

Chunk k belongs to rank k // G and is that rank's accumulation step k % G; its rows are [cuts[k], cuts[k + 1]),
contiguous in rank-major order. Cuts are arbitrary: chunks may be uneven, empty (no rows), or hold only fully
masked rows (one chunk's mask cleared when the draw says so). Each chunk is padded to the step's width or, as
trainers pad each micro-batch to its longest row, to its own: the last selected token of its rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from fuzz.engines.split import TOKENS_PER_SHARD, padded_size
from fuzz.judge.draws import BOOLEANS, Draw, choice, integers
from fuzz.judge.forward import FLOAT32_INSIDE_FLOAT64, compare_values, non_finite_hint
from fuzz.judge.gradients import ExplainGradient
from fuzz.judge.outputs import ReadBack
from fuzz.judge.verdict import NON_FINITE, Verdict, out_of_tolerance
from reference.accumulation import off_by
from reference.case import Case
from reference.contract import ChunkedCall
from reference.exact import exact_results
from reference.tolerance import Precision

SHAPES: tuple[tuple[int, int], ...] = ((1, 2), (2, 1), (2, 2), (1, 4), (4, 1))  # (ranks R, accumulation steps G)
CUT_KINDS = ("even", "uneven", "one empty chunk")
WIDTH_KINDS = ("the step's width", "each chunk's longest row")


def shape_name(shape: tuple[int, int]) -> str:
    return f"R{shape[0]}xG{shape[1]}"


@dataclass(frozen=True)
class ChunkSplit:
    ranks: int
    steps: int
    cuts: tuple[int, ...]  # R * G + 1 row cuts
    widths: tuple[int, ...]  # each chunk's token width

    @property
    def chunks(self) -> int:
        return self.ranks * self.steps

    def rows(self, k: int) -> slice:
        return slice(self.cuts[k], self.cuts[k + 1])

    def active(self, case: Case) -> int:
        """How many chunks hold a selected token: where the combination has something to combine."""
        return sum(bool(case.mask[self.rows(k), :self.widths[k]].any()) for k in range(self.chunks))

    def describe(self, k: int) -> str:
        rows = self.rows(k)
        return (f"chunk {k} (rank {k // self.steps}, accumulation step {k % self.steps}; rows [{rows.start}, "
                f"{rows.stop}), width {self.widths[k]})")


def _cuts(draw: Draw, batch: int, parts: int) -> tuple[int, ...]:
    kind = draw(choice(CUT_KINDS), "row split")
    if kind == "uneven":
        inner = sorted(draw(st.lists(integers(0, batch), min_size=parts - 1, max_size=parts - 1), "row cuts"))
        return (0, *inner, batch)
    filled = parts - (kind != "even")
    even = [round(j * batch / filled) for j in range(filled + 1)]
    if kind == "one empty chunk":
        empty = draw(integers(0, parts - 1), "empty chunk")
        even.insert(empty, even[empty])  # chunk `empty` is [c, c)
    return tuple(even)


def longest_row(mask: np.ndarray) -> int:
    """The width a micro-batch is padded to: one past its rows' last selected token (0 if none)."""
    selected = np.flatnonzero(mask.any(axis=0))
    return int(selected[-1]) + 1 if selected.size else 0


def draw_chunks(draw: Draw, case: Case, shape: tuple[int, int]) -> tuple[Case, ChunkSplit]:
    """R x G chunks of the case's rows; the case comes back with one chunk's mask cleared when the draw says so."""
    ranks, steps = shape
    batch, tokens = case.shape
    cuts = _cuts(draw, batch, ranks * steps)
    if draw(BOOLEANS, "one chunk all masked"):
        k = draw(integers(0, ranks * steps - 1), "all-masked chunk")
        mask = case.mask.copy()
        mask[cuts[k]:cuts[k + 1]] = False
        case = case.with_(**{case.contract.mask.name: mask})
    own = draw(choice(WIDTH_KINDS), "chunk width") == WIDTH_KINDS[1]
    widths = tuple(longest_row(case.mask[cuts[k]:cuts[k + 1]]) if own else tokens for k in range(ranks * steps))
    return case, ChunkSplit(ranks, steps, cuts, widths)


def uneven_chunks(case: Case, shape: tuple[int, int]) -> ChunkSplit:
    """R x G chunks of the case's rows, of different sizes: one row in each chunk but the last, which takes the rest,
    every chunk the step's width. On rows of different counts each chunk's own count is then unlike its share of
    the step's, and unlike R or G times it, where an even split of equal rows makes them all one value. The case
    needs at least R x G rows."""
    ranks, steps = shape
    batch, tokens = case.shape
    if batch < ranks * steps:
        raise ValueError(f"{batch} rows cannot make {ranks * steps} chunks of at least one row")
    return ChunkSplit(ranks, steps, (*range(ranks * steps), batch), (tokens,) * (ranks * steps))


def chunk_case(case: Case, split: ChunkSplit, k: int) -> Case:
    """Chunk k's inputs as a Case of their own: its rows, its width (contiguous, as a data loader makes them)."""
    rows, width = split.rows(k), split.widths[k]
    values = {spec.name: case.values[spec.name][tuple(rows if dim == "batch" else slice(0, width) for dim in spec.dims)]
              for spec in case.contract.inputs}
    return case.with_(layout="contiguous", **values)


def chunked(case: Case) -> ChunkedCall:
    if case.contract.chunked is None:
        raise ValueError(f"the {case.contract.name} contract is not a per-chunk function (it has no ChunkedCall)")
    return case.contract.chunked


def step_keywords(case: Case, split: ChunkSplit) -> dict[str, int]:
    return chunked(case).keywords(case, split.ranks, split.steps)


def chunk_weight(case: Case, split: ChunkSplit) -> float:
    return chunked(case).weight(case.contract.bound, split.ranks, split.steps)


def chunk_cases(case: Case, split: ChunkSplit) -> list[Case]:
    return [chunk_case(case, split, k) for k in range(split.chunks)]


def explain_combination(case: Case, split: ChunkSplit, combined: float, counts_its_own: bool = False) -> str | None:
    """The contract's name for a wrong combination; `counts_its_own`: a rank form's, which counts the step's
    normalizers itself (so it may leave a count un-reduced over the ranks)."""
    explain = chunked(case).explain
    return explain(case, chunk_cases(case, split), split.ranks, split.steps, combined,
                   counts_its_own) if explain else None


def judge_combined(case: Case, split: ChunkSplit, combined: float, dtype: str, precision: Precision,
                   chunk_values: Sequence[float], counts_its_own: bool = False) -> Verdict:
    """The chunks' combined output (from `chunk_values`, each chunk's, in chunk order) against the full batch's
    exact one. A wrong value is named by the contract's explanation of the combination where one matches, said
    instead of the float32 rounding a float64 value is within (which any small slip is: an epsilon in a count
    too); a non-finite one by what makes the first non-finite chunk's own value so, in that chunk's inputs (a chunk
    of no rows or width 0 is not in the full batch, whose story would name something else)."""
    name = case.contract.outputs[0].name
    judged = compare_values(ReadBack({name: np.array(combined)}, {name: dtype}), case, precision)
    hint = explain_combination(case, split, combined, counts_its_own) if not judged.ok else None
    if hint:
        judged.failures = [replace(f, message=f"{f.message.removesuffix(f': {FLOAT32_INSIDE_FLOAT64}')}: {hint}",
                                   hint=hint) if f.kind == out_of_tolerance(name) else f for f in judged.failures]
    elif not judged.ok and (exact := float(exact_results(case).outputs()[name])) and np.isfinite(combined):
        # no usual mistake matches: the factor it is off by still tells a factor of the step's from anything else
        ratio = off_by(combined, exact, split.ranks, split.steps, name)
        judged.failures = [replace(f, message=f"{f.message}: {ratio}")
                           if f.kind == out_of_tolerance(name) and FLOAT32_INSIDE_FLOAT64 not in f.message else f
                           for f in judged.failures]
    culprit = next((k for k, value in enumerate(chunk_values) if not np.isfinite(value)), None)
    if culprit is not None:
        story = non_finite_hint(chunk_case(case, split, culprit))
        said = (f"{name} is not finite: {combined!r}, from {split.describe(culprit)}'s {chunk_values[culprit]!r}"
                + (f": {story}" if story else ""))
        judged.failures = [replace(f, message=said) if f.kind == NON_FINITE else f for f in judged.failures]
    return judged


def explain_combined_gradient(case: Case, split: ChunkSplit) -> ExplainGradient | None:
    """How a wrong combined gradient of `split` is named: the contract's name for it, which knows the split (the
    single-process mistakes do not describe a step)."""
    explain = chunked(case).explain_gradient
    if explain is None:
        return None
    return lambda got, want, bound: explain(got, want, bound, split.ranks, split.steps, case.contract.bound)


# The sizes a framework that compiles a program per input shape (JAX: even an un-jitted function's every op) sees:
# each chunk's rows and width rounded up to one of these, so a cell compiles a few shapes, not one per example.
BUCKET_ROWS = (1, 2, 4, 8, 16)
BUCKET_WIDTHS = TOKENS_PER_SHARD  # the shard_map engines' widths


def _bucket(size: int, menu: tuple[int, ...]) -> int:
    """`size` rounded up to the menu; 0 stays 0: an empty chunk stays empty."""
    return padded_size(size, menu) if size else 0


def bucketed_chunks(case: Case, split: ChunkSplit) -> tuple[Case, ChunkSplit]:
    """The step and its split with every chunk's rows and width rounded up to the bucket menus, as a trainer of such
    a framework pads its micro-batches to fixed shapes. Sound by the contract: the step gains masked tokens
    (values 0) to the bucketed width, and each chunk fully masked rows (values 0) after its own, rows of the
    step that the exact result counts as the function does (rows="all" counts every row); a chunk's width is
    rounded up within the step's. Empty chunks, chunks of width 0 and a step of width 0 stay so."""
    tokens = case.shape[1]
    width = _bucket(tokens, BUCKET_WIDTHS)
    sizes = [split.cuts[k + 1] - split.cuts[k] for k in range(split.chunks)]
    cuts = [0]
    for size in sizes:
        cuts.append(cuts[-1] + _bucket(size, BUCKET_ROWS))
    source = np.full(cuts[-1], -1, dtype=np.int64)  # each new row's row of the drawn step, -1 where added
    for k, size in enumerate(sizes):
        source[cuts[k]:cuts[k] + size] = np.arange(split.cuts[k], split.cuts[k + 1])
    kept = np.flatnonzero(source >= 0)
    values = {}
    for spec in case.contract.inputs:
        old = case.values[spec.name]
        new = np.zeros(tuple(cuts[-1] if dim == "batch" else width if dim == "tokens" else old.shape[axis]
                             for axis, dim in enumerate(spec.dims)), dtype=old.dtype)
        rows = np.take(old, source[kept], axis=spec.dims.index("batch")) if "batch" in spec.dims else old
        new[tuple(kept if dim == "batch" else slice(0, tokens) if dim == "tokens" else slice(None)
                  for dim in spec.dims)] = rows
        values[spec.name] = new
    widths = tuple(min(_bucket(w, BUCKET_WIDTHS), width) if w < tokens else width for w in split.widths)
    return case.with_(**values), ChunkSplit(split.ranks, split.steps, tuple(cuts), widths)
