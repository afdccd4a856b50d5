"""The benchmark sizes, and which run on which device by default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    name: str
    batch: int
    tokens: int

    @property
    def label(self) -> str:
        return f"{self.batch}x{self.tokens}"


SIZES: dict[str, Size] = {
    size.name: size
    for size in (
        Size("small", 8, 512),
        Size("medium", 256, 4096),
        Size("large", 1024, 16384),
        Size("xl", 4096, 32768),  # past any CPU cache: run on CPU only when asked for
    )
}

# What a run measures per device when no sizes are asked for.
DEFAULT_SIZES: dict[str, tuple[str, ...]] = {
    "cpu": ("small", "medium", "large"),
    "cuda": ("small", "medium", "large", "xl"),
}

DEVICES: tuple[str, ...] = ("cpu", "cuda")
DEFAULT_DTYPES: tuple[str, ...] = ("float32", "bfloat16")


def sizes_for(device: str, requested: tuple[str, ...] | None) -> tuple[Size, ...]:
    names = requested if requested else DEFAULT_SIZES.get(device, DEFAULT_SIZES["cpu"])
    return tuple(SIZES[name] for name in names)
