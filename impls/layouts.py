"""Memory layouts, described once as (buffer size, shape, element strides, offset) so every framework
with strides builds exactly the same views. The gaps a layout skips hold a poison value (NaN in the
log-probs, True in the mask), so a kernel that ignores strides reads garbage and shows it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYOUTS: tuple[str, ...] = ("contiguous", "transposed", "step-sliced", "expanded", "offset", "negative-strides")
STRIDED_LAYOUTS_WITHOUT_NEGATIVE: tuple[str, ...] = LAYOUTS[:-1]
STORAGE_OFFSET = 3


@dataclass(frozen=True)
class StridedView:
    buffer: np.ndarray  # 1-D, the whole storage
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements; may be 0 or negative
    offset: int  # in elements


def _strides_and_extent(layout: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], int, int]:
    """Element strides, the offset of element [0, ..., 0], and the buffer size for a layout."""
    if len(shape) == 1:
        step = {"contiguous": 1, "transposed": 1, "step-sliced": 2, "expanded": 0, "offset": 1,
                "negative-strides": -1}[layout]
        strides = (step,)
    else:
        b, t = (max(size, 1) for size in shape)  # as torch does: an empty dim does not zero the strides
        strides = {
            "contiguous": (t, 1),
            "transposed": (1, b),
            "step-sliced": (4 * t, 2),
            "expanded": (0, 1),
            "offset": (t, 1),
            "negative-strides": (-t, -1),
        }[layout]
    if 0 in shape:
        return strides, 0, 0
    span = sum((size - 1) * abs(stride) for size, stride in zip(shape, strides))
    offset = STORAGE_OFFSET if layout == "offset" else 0
    if layout == "negative-strides":
        offset = span
    return strides, offset, offset + (0 if layout == "negative-strides" else span) + 1


def _rows_equal(values: np.ndarray) -> bool:
    return values.size == 0 or np.array_equal(values, np.broadcast_to(values[:1], values.shape),
                                              equal_nan=values.dtype != np.bool_)


def strided_view(values: np.ndarray, layout: str, poison: object) -> StridedView:
    """Lay `values` out as `layout` in a fresh 1-D buffer (of values' dtype) filled with `poison`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    strides, offset, size = _strides_and_extent(layout, values.shape)
    if layout == "expanded" and not _rows_equal(values):
        raise ValueError("the expanded layout needs values that are equal along the batch axis")
    buffer = np.full(size, poison, dtype=values.dtype)
    if values.size:
        view = np.lib.stride_tricks.as_strided(
            buffer[offset:], values.shape, [s * buffer.itemsize for s in strides], writeable=True
        )
        view[...] = values  # for expanded, every alias gets the same (equal) value
    return StridedView(buffer, tuple(values.shape), strides, offset)


def numpy_view(view: StridedView) -> np.ndarray:
    """The view over its buffer; an empty one keeps the layout's strides too (a (2, 0) transposed array has
    strides (1, 2) elements, as in torch), so code that depends on strides sees them at every size."""
    return np.lib.stride_tricks.as_strided(
        view.buffer[view.offset :],
        view.shape,
        [s * view.buffer.itemsize for s in view.strides],
        writeable=numpy_writeable(view),
    )


def numpy_writeable(view: StridedView) -> bool:
    """Like np.broadcast_to: an array whose elements alias each other (a stride of 0) is read-only."""
    return 0 not in view.strides or 0 in view.shape
