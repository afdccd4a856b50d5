"""Hypothesis strategies for framework-neutral Cases.

Structure (shape, dtype, layout, kinds of values and masks, densities) is drawn by Hypothesis with a
label on every draw, so it shrinks toward small, plain cases; the bulk values come from a NumPy generator
seeded by a drawn seed, since drawing thousands of floats one by one is slow and shrinks no better.

Magnitude bound (overflow is outside the contract): per row, |A_i| * sum_t |l_it| <= largest(dtype) / 64,
and the whole batch's sum of those stays below largest(accumulation dtype) / 64, so every exact result and
partial sum is representable. Values are normal or exactly 0: no subnormal inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from impls.case import Case
from impls.dtypes import accumulation_dtype, largest, round_to, smallest_normal

SHAPE_KINDS = ("tiny", "batch == tokens", "batch of 1", "empty", "general", "one long row")
VALUE_KINDS = ("log-probs", "small integers", "general")
MASK_KINDS = ("all true", "random density", "prefix lengths", "some rows empty", "single token", "all false")
PADDING_KINDS = ("finite", "huge finite", "-inf", "nan")
ADVANTAGE_KINDS = ("mixed signs", "some exactly 0", "all 0", "all equal")

# Sizes come from short menus (buckets): a compiled function (jax.jit, torch.compile) compiles once per shape
# it sees (~0.1 s forward, ~0.2 s with the backward in XLA), so the number of distinct shapes, not the number
# of examples, sets what a cell costs. The menus keep every edge: 0 and 1, batch == tokens, sizes off any
# vector width (3, 7, 33, 1031), powers of two (16, 512, 4096), rows of 16 tokens and more (where a
# half-precision running sum shows), and one long row. Measured with fuzz/strategies.py's draws plus the
# relations' shapes (seed 0-2): 35 / 65 / 68 distinct shapes in 40 / 200 / 400 examples, against 41 / 78 / 96
# with the wider menus of before (batch 1-5, 8, 16, 32; tokens 1-4, 7, 16, 33, 128, 300).
BATCH_SIZES = (1, 2, 3, 4, 8, 16)  # closed under halving, for the "split the batch" relation
TOKEN_SIZES = (1, 3, 7, 16, 33, 300)
LONG_ROW_SIZES = (512, 1031, 4096)
SQUARE_SIZES = tuple(sorted(set(BATCH_SIZES) & set(TOKEN_SIZES)))  # the "batch == tokens" kind


BOOLEANS = st.booleans()
SEEDS = st.integers(0, 2**32 - 1)


def next_token_size(tokens: int) -> int:
    """The next bucket above `tokens`: where a case padded with masked columns lands."""
    return next((size for size in (*TOKEN_SIZES, *LONG_ROW_SIZES) if size > tokens), 2 * tokens)

Draw = Callable[[st.SearchStrategy, str], Any]


@functools.cache
def choice(values: tuple[Any, ...]) -> st.SearchStrategy:
    """`st.sampled_from(values)`, built once per menu: Hypothesis caches what it learns about a strategy on the
    object (its label, whether it can be empty), so a fresh one per draw costs more than the draw itself."""
    return st.sampled_from(values)


@functools.cache
def integers(low: int, high: int) -> st.SearchStrategy:
    """`st.integers(low, high)`, built once (as `choice`)."""
    return st.integers(low, high)


def _weighted(kinds: Sequence[str], weights: dict[str, int]) -> tuple[str, ...]:
    """`kinds` with some repeated: sampled_from draws uniformly, and shrinks toward the first (simplest).

    The edges (empty, all false, all zero) stay in, but most examples are dense enough to show the bugs
    that need many active rows of both signs (abs after the sum) or long rows (half-precision sums)."""
    return tuple(kind for kind in kinds for _ in range(weights.get(kind, 1)))


SHAPE_KIND_MENU = _weighted(SHAPE_KINDS, {"general": 3, "one long row": 2})
MASK_MENU = _weighted(MASK_KINDS, {"random density": 2, "prefix lengths": 2})
ADVANTAGE_MENU = _weighted(ADVANTAGE_KINDS, {"mixed signs": 3})


def draw_shape(draw: Draw) -> tuple[int, int]:
    kind = draw(choice(SHAPE_KIND_MENU), "shape kind")
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


def _values(rng: np.random.Generator, kind: str, shape: tuple[int, ...], zero_fraction: float) -> np.ndarray:
    if kind == "log-probs":
        values = -rng.exponential(rng.choice([0.05, 1.0, 8.0]), shape)
    elif kind == "small integers":
        values = rng.integers(-8, 1, shape).astype(np.float64)
    else:
        values = rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(-12, 12, shape))
    return np.where(rng.random(shape) < zero_fraction, 0.0, values)


def _flush_subnormals(values: np.ndarray, dtype: str) -> np.ndarray:
    rounded = round_to(values, dtype)
    return np.where(np.abs(rounded) < smallest_normal(dtype), 0.0, rounded)


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
) -> Case:
    """Draw one Case; `draw(strategy, label)` is Hypothesis' draw with a label for the story."""
    story: list[tuple[str, object]] = []

    def labelled(strategy: st.SearchStrategy, label: str) -> Any:
        value = draw(strategy, label)
        story.append((label, value))
        return value

    dtype = labelled(choice(tuple(dtypes)), "dtype")
    device = labelled(choice(tuple(devices)), "device")
    layout = labelled(choice(tuple(layouts)), "layout")
    batch, tokens = draw_shape(labelled)
    value_kind = labelled(choice(VALUE_KINDS), "log-prob values")
    mask_kind = labelled(choice(MASK_MENU), "mask")
    density = labelled(choice((0.7, 0.05, 0.5, 0.95)), "mask density")
    padding_kind = labelled(choice(PADDING_KINDS), "masked-out values")
    zero_fraction = labelled(choice((0.0, 0.2, 1.0)), "exact zeros")
    advantage_kind = labelled(choice(ADVANTAGE_MENU), "advantages")
    seed = labelled(SEEDS, "seed")

    rng = np.random.default_rng(seed)
    rows = 1 if layout == "expanded" else batch  # expanded (stride 0) needs equal rows
    log_probs = _values(rng, value_kind, (rows, tokens), zero_fraction)
    mask = _mask(rng, mask_kind, (rows, tokens), density)
    advantages = rng.normal(0.0, rng.choice([0.1, 1.0, 16.0]), rows)
    if advantage_kind == "some exactly 0":
        advantages[rng.random(rows) < 0.5] = 0.0
    elif advantage_kind == "all 0":
        advantages[:] = 0.0
    if advantage_kind == "all equal" or layout == "expanded":
        advantages[:] = advantages[:1] if rows else advantages

    # Scale by a power of two so the bound in the module docstring holds (exact, keeps values normal).
    row_magnitudes = np.abs(advantages) * np.abs(np.where(mask, log_probs, 0)).sum(axis=1) if tokens else 0
    worst = max(float(np.max(row_magnitudes, initial=0.0)) * 64 / largest(dtype),
                float(np.sum(row_magnitudes)) * (batch // max(rows, 1)) * 64 / largest(accumulation_dtype(dtype)))
    if worst > 1:
        advantages = advantages * 2.0 ** -np.ceil(np.log2(worst) / 2)
        log_probs = log_probs * 2.0 ** -np.ceil(np.log2(worst) / 2)
    log_probs = _flush_subnormals(log_probs, dtype)
    advantages = _flush_subnormals(advantages, dtype)

    padding = _values(rng, "general", (rows, tokens), 0.0) * (1e4 if padding_kind == "huge finite" else 1.0)
    padding = round_to(np.clip(padding, -largest(dtype) / 2, largest(dtype) / 2), dtype)
    padding = {"-inf": -np.inf, "nan": np.nan}.get(padding_kind, padding)
    log_probs = np.where(mask, log_probs, padding)
    if rows != batch:
        log_probs, mask = np.repeat(log_probs, batch, axis=0), np.repeat(mask, batch, axis=0)
        advantages = np.repeat(advantages, batch)
    if batch == 0 or tokens == 0:  # the drawn mask kind is vacuous there: say what the mask is
        empty = "no rows (batch 0)" if batch == 0 else "every row has no tokens (tokens 0)"
        story = [(label, empty if label == "mask" else value) for label, value in story]
    return Case(
        token_log_probs=log_probs.reshape(batch, tokens),
        advantages=advantages.reshape(batch),
        token_mask=mask.reshape(batch, tokens),
        dtype=dtype,
        layout=layout,
        device=device,
        story=tuple(story),
    )


@st.composite
def cases(
    draw: st.DrawFn,
    dtypes: Sequence[str] = ("float32",),
    layouts: Sequence[str] = ("contiguous",),
    devices: Sequence[str] = ("cpu",),
) -> Case:
    """A strategy of Cases (labels are kept in Case.story)."""
    return draw_case(lambda strategy, label: draw(strategy), dtypes=dtypes, layouts=layouts, devices=devices)
