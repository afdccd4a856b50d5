"""Hypothesis strategies for framework-neutral Cases of any contract, and their cotangents.

Structure (shape, dtype, layout, kinds of values and masks, densities) is drawn by Hypothesis with a
label on every draw, so it shrinks toward small, plain cases; the bulk values come from a NumPy generator
seeded by a drawn seed, since drawing thousands of floats one by one is slow and shrinks no better. What
values an input takes, and the magnitude bound that keeps every exact result representable, are the
contract's (its Domain); the shapes, masks, padding and layouts are the same for every contract. Values are
normal or exactly 0: no subnormal inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from reference.case import Case
from reference.contract import Contract
from reference.contracts import DEFAULT_CONTRACT
from reference.dtypes import largest, round_to, smallest_normal
from reference.values import draw_values

SHAPE_KINDS = ("tiny", "batch == tokens", "batch of 1", "empty", "general", "one long row")
MASK_KINDS = ("all true", "random density", "prefix lengths", "some rows empty", "single token", "all false")
PADDING_KINDS = ("finite", "huge finite", "-inf", "nan")

# Sizes come from short menus (buckets): a compiled function (jax.jit, torch.compile) compiles once per shape
# it sees (~0.1 s forward, ~0.2 s with the backward in XLA), so the number of distinct shapes, not the number
# of examples, sets what a cell costs. The menus keep every edge: 0 and 1, batch == tokens, sizes off any
# vector width (3, 7, 33, 1031), powers of two (16, 512, 4096), rows of 16 tokens and more (where a
# half-precision running sum shows), and one long row.
BATCH_SIZES = (1, 2, 3, 4, 8, 16)  # closed under halving, for the "split the batch" relation
TOKEN_SIZES = (1, 3, 7, 16, 33, 300)
LONG_ROW_SIZES = (512, 1031, 4096)
SQUARE_SIZES = tuple(sorted(set(BATCH_SIZES) & set(TOKEN_SIZES)))  # the "batch == tokens" kind


# The value each draw takes in a fixed case (fuzz.judge.anchors) where the case does not name it: Hypothesis'
# simplest, the one it starts from and shrinks toward (a menu's first entry, the integer nearest 0, False, seed 0).
# Keyed by the strategy object (which this keeps): the constants below and what `choice` and `integers` build.
_SIMPLEST: dict[st.SearchStrategy, Any] = {}


def _with_simplest(strategy: st.SearchStrategy, value: Any) -> st.SearchStrategy:
    _SIMPLEST[strategy] = value
    return strategy


def simplest(strategy: st.SearchStrategy, label: str) -> Any:
    """The simplest value of a strategy built by this module (see _SIMPLEST); a TypeError naming the draw's label
    for any other."""
    try:
        return _SIMPLEST[strategy]
    except KeyError:
        raise TypeError(f"the draw {label!r} has no known simplest value: draw it from choice(), integers(), "
                        "BOOLEANS or SEEDS") from None


BOOLEANS = _with_simplest(st.booleans(), False)
# A value seed, drawn as 4 bytes, not as a wide integer: Hypothesis draws a wide integer from the constants in
# the source of whatever local modules are loaded (its "local constants", 5% of draws), so the same --seed would
# draw other cases as the project's code, or the user's, changes; bytes have no such constants.
SEEDS = _with_simplest(st.binary(min_size=4, max_size=4).map(lambda raw: int.from_bytes(raw, "little")), 0)

Draw = Callable[[st.SearchStrategy, str], Any]


def drawer(data: st.DataObject) -> Draw:
    """`draw(strategy, label)` for the fuzzer's examples: the same choices as `data.draw`, made by the test case's
    own draw. `data.draw` adds to each call what printing the draws and Hypothesis' explain phase need; the
    fuzzer prints its own story and runs no explain phase, and that bookkeeping (saving the global `random`
    state twice, among others) cost a tenth of a small example's time over its dozen draws."""
    conjecture = getattr(data, "conjecture_data", None)  # Hypothesis' semi-stable attribute; else the public way
    if conjecture is None:
        return lambda strategy, label: data.draw(strategy, label=label)
    return lambda strategy, label: conjecture.draw(strategy)


@functools.cache
def choice(values: tuple[Any, ...]) -> st.SearchStrategy:
    """`st.sampled_from(values)`, built once per menu: Hypothesis caches what it learns about a strategy on the
    object (its label, whether it can be empty), so a fresh one per draw costs more than the draw itself."""
    return _with_simplest(st.sampled_from(values), values[0])


@functools.cache
def integers(low: int, high: int) -> st.SearchStrategy:
    """`st.integers(low, high)`, built once (as `choice`)."""
    return _with_simplest(st.integers(low, high), min(max(0, low), high))


def _weighted(kinds: Sequence[str], weights: dict[str, int]) -> tuple[str, ...]:
    """`kinds` with some repeated: sampled_from draws uniformly, and shrinks toward the first (simplest).

    The edges (empty, all false, all zero) stay in, but most examples are dense enough to show the bugs
    that need many active rows of both signs (abs after the sum) or long rows (half-precision sums)."""
    return tuple(kind for kind in kinds for _ in range(weights.get(kind, 1)))


SHAPE_KIND_MENU = _weighted(SHAPE_KINDS, {"general": 3, "one long row": 2})
MASK_MENU = _weighted(MASK_KINDS, {"random density": 2, "prefix lengths": 2})

# An engine's cells (a batch split over ranks or micro-batches) have few examples each, and a split only tests its
# collectives where several ranks hold rows with selected tokens and a nonzero cotangent crosses them: their
# draws start from such a case (the simplest, where Hypothesis begins and shrinks to, is a 4 x 7 batch, every
# token selected) and leave out the kinds that cannot cross ranks (no rows, every token masked, every value 0).
# Empty and fully masked shards still come from the split's own draws (an empty shard, one shard all masked), and
# a gradient cell's fixed cases (fuzz.judge.anchors) include the batch with nothing selected.
SPLIT_SHAPE_MENU = ("general", "general", "general", "batch == tokens", "tiny", "one long row")
SPLIT_BATCH_SIZES = (4, 2, 3, 8, 16)
SPLIT_TOKEN_SIZES = (7, 3, 16, 33, 300, 1)
SPLIT_MASK_MENU = ("all true", "random density", "random density", "prefix lengths", "prefix lengths",
                   "some rows empty", "single token")
EMPHASES = ("any", "splits")


def draw_shape(draw: Draw, emphasis: str = "any") -> tuple[int, int]:
    kind = draw(choice(SPLIT_SHAPE_MENU if emphasis == "splits" else SHAPE_KIND_MENU), "shape kind")
    if kind == "general" and emphasis == "splits":
        return draw(choice(SPLIT_BATCH_SIZES), "batch"), draw(choice(SPLIT_TOKEN_SIZES), "tokens")
    if kind == "tiny":
        return draw(integers(0, 3), "batch"), draw(integers(0, 3), "tokens")
    if kind == "batch == tokens":
        n = draw(choice(SQUARE_SIZES), "batch == tokens")
        return n, n
    if kind == "batch of 1":
        return 1, draw(choice(TOKEN_SIZES + LONG_ROW_SIZES[:1]), "tokens")
    if kind == "empty":
        if draw(BOOLEANS, "empty batch"):
            return 0, draw(choice((0, *TOKEN_SIZES)), "tokens")
        return draw(choice(BATCH_SIZES), "batch"), 0
    if kind == "general":
        return draw(choice(BATCH_SIZES), "batch"), draw(choice(TOKEN_SIZES), "tokens")
    return draw(choice(BATCH_SIZES[:4]), "batch"), draw(choice(LONG_ROW_SIZES), "tokens")


def _flush_subnormals(values: np.ndarray, dtype: str) -> np.ndarray:
    rounded = round_to(values, dtype)
    return np.where(np.abs(rounded) < smallest_normal(dtype), 0.0, rounded)


DENSITY_MASKS = ("random density", "some rows empty")  # the mask kinds that read the drawn density
# A mask no draw picks, for the fixed cases (fuzz.judge.anchors): the rows' counts spread evenly from 0 to every
# token (all different where batch <= tokens + 1, as in the 4 x 7 fixed case; one row has none), rows and positions
# shuffled. Rows of different counts are what make a ratio of sums and of means, or a mean of row means, depend on
# every selected value.
MIXED_LENGTHS = "mixed lengths, 0 to all"


def _mask(rng: np.random.Generator, kind: str, shape: tuple[int, int], density: float) -> np.ndarray:
    batch, tokens = shape
    if kind == "all true":
        return np.ones(shape, bool)
    if kind == "all false":
        return np.zeros(shape, bool)
    if kind == "prefix lengths":
        return np.arange(tokens)[None, :] < rng.integers(0, tokens + 1, (batch, 1))
    if kind == "single token":
        mask = np.zeros(shape, bool)
        if tokens:
            mask[np.arange(batch), rng.integers(0, tokens, batch)] = True
        return mask
    if kind == MIXED_LENGTHS:
        lengths = rng.permutation(np.round(np.linspace(0, tokens, batch)).astype(int))
        return np.array([np.isin(np.arange(tokens), rng.permutation(tokens)[:length]) for length in lengths],
                        bool).reshape(shape)
    mask = rng.random(shape) < density
    if kind == "some rows empty":
        mask[rng.random(batch) < 0.5] = False
    return mask


def draw_case(
    draw: Draw,
    *,
    dtypes: Sequence[str],
    layouts: Sequence[str],
    devices: Sequence[str] = ("cpu",),
    contract: Contract | None = None,
    masked_values: str = "any",
    emphasis: str = "any",
) -> Case:
    """Draw one Case of `contract` (the default one if None); `draw(strategy, label)` is Hypothesis' draw with a
    label for the story. `masked_values`: "any" puts finite, huge, -inf or NaN values at masked positions;
    "finite" only finite ones (for code whose padding is finite by construction). `emphasis`: "splits" for an
    engine's cells (see SPLIT_SHAPE_MENU)."""
    contract = contract or DEFAULT_CONTRACT
    story: list[tuple[str, object]] = []

    def labelled(strategy: st.SearchStrategy, label: str) -> Any:
        value = draw(strategy, label)
        story.append((label, value))
        return value

    menus = contract.domain.menus
    token_inputs = [spec for spec in contract.inputs if spec.role == "tokens"]
    row_inputs = [spec for spec in contract.inputs if spec.role == "rows"]
    dtype = labelled(choice(tuple(dtypes)), "dtype")
    device = labelled(choice(tuple(devices)), "device")
    layout = labelled(choice(tuple(layouts)), "layout")
    splits = emphasis == "splits"

    def kinds(name: str) -> tuple[str, ...]:
        menu = menus[name]
        return menu.split_kinds if splits and menu.split_kinds is not None else menu.kinds

    batch, tokens = draw_shape(labelled, emphasis)
    token_kinds = {spec.name: labelled(choice(kinds(spec.name)), menus[spec.name].label) for spec in token_inputs}
    mask_kind = labelled(choice(SPLIT_MASK_MENU if splits else MASK_MENU), "mask")
    density = labelled(choice((0.7, 0.05, 0.5, 0.95)), "mask density")
    padding_kind = labelled(choice(PADDING_KINDS if masked_values == "any" else PADDING_KINDS[:2]),
                            "masked-out values")
    zero_fraction = labelled(choice((0.0, 0.2) if splits else (0.0, 0.2, 1.0)), "exact zeros")
    row_kinds = {spec.name: labelled(choice(kinds(spec.name)), menus[spec.name].label) for spec in row_inputs}
    seed = labelled(SEEDS, "seed")

    rng = np.random.default_rng(seed)
    rows = 1 if layout == "expanded" else batch  # expanded (stride 0) needs equal rows
    values = {spec.name: menus[spec.name].make(rng, token_kinds[spec.name], (rows, tokens), zero_fraction)
              for spec in token_inputs}
    mask = _mask(rng, mask_kind, (rows, tokens), density)
    values.update({spec.name: menus[spec.name].make(rng, row_kinds[spec.name], (rows,), zero_fraction)
                   for spec in row_inputs})
    values = contract.domain.bound(values, mask, dtype, batch // max(rows, 1))
    values = {name: _flush_subnormals(value, dtype) for name, value in values.items()}
    for spec in token_inputs:
        padding = draw_values(rng, "general", (rows, tokens), 0.0) * (1e4 if padding_kind == "huge finite" else 1.0)
        padding = round_to(np.clip(padding, -largest(dtype) / 2, largest(dtype) / 2), dtype)
        padding = {"-inf": -np.inf, "nan": np.nan}.get(padding_kind, padding)
        values[spec.name] = np.where(mask, values[spec.name], padding)
    values[contract.mask.name] = mask
    if rows != batch:
        values = {name: np.repeat(value, batch, axis=0) for name, value in values.items()}
    if batch == 0 or tokens == 0:  # the drawn mask kind is vacuous there: say what the mask is
        empty = "no rows (batch 0)" if batch == 0 else "every row has no tokens (tokens 0)"
        story = [(label, empty if label == "mask" else value) for label, value in story]
    if mask_kind not in DENSITY_MASKS or batch == 0 or tokens == 0:  # drawn, but no part of this mask
        story = [(label, value) for label, value in story if label != "mask density"]
    sizes = {"batch": batch, "tokens": tokens}
    shaped = {spec.name: values[spec.name].reshape(tuple(sizes[dim] for dim in spec.dims)) for spec in contract.inputs}
    return Case(contract=contract, dtype=dtype, layout=layout, device=device, story=tuple(story), **shaped)


@st.composite
def cases(
    draw: st.DrawFn,
    dtypes: Sequence[str] = ("float32",),
    layouts: Sequence[str] = ("contiguous",),
    devices: Sequence[str] = ("cpu",),
    contract: Contract | None = None,
    masked_values: str = "any",
) -> Case:
    """A strategy of Cases (labels are kept in Case.story)."""
    return draw_case(lambda strategy, label: draw(strategy), dtypes=dtypes, layouts=layouts, devices=devices,
                     contract=contract, masked_values=masked_values)


def draw_cotangents(data: st.DataObject, case: Case, emphasis: str = "any") -> dict[str, np.ndarray]:
    """A cotangent per output of the case's contract: a labelled kind (all outputs, some, zero), then values; for
    an engine's cells ("splits") only kinds under which gradients cross ranks."""
    contract = case.contract
    menu = contract.cotangent_kinds
    if emphasis == "splits":
        menu = tuple(kind for kind in menu if kind not in contract.trivial_cotangent_kinds)
    draw = drawer(data)
    kind = draw(choice(menu), "cotangents")
    seed = draw(SEEDS, "cotangent seed")
    return contract.cotangents(kind, np.random.default_rng(seed), case)
