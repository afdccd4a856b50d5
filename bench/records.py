"""One record per benchmarked row, read from pytest-benchmark's JSON; the floor of its contract's bytes joined onto
each row. An implementation row's fraction of the floor is the one timed side by side with the floor kernels
(bench/paired.py); a row saved before that was timed (no paired times) falls back to its GB/s over the floor row's."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.sizes import SIZES
from reference.contracts import CONTRACT_NAMES

FLOOR = "floor"
# A row saved before the benchmarks covered more than one contract is the default contract's.
DEFAULT_CONTRACT = CONTRACT_NAMES[0]


@dataclass(frozen=True)
class Record:
    implementation: str  # an implementation's name, or "floor" (the best floor kernel)
    contract: str  # the contract it implements (a floor row: the contract whose bytes it reads)
    parameters: str  # the contract's bound parameters that matter ("token-mean"; "" for none)
    device: str
    dtype: str
    batch: int
    tokens: int
    median_s: float
    bytes: int
    gbps: float
    floor_gbps: float | None
    fraction_of_floor: float | None
    # the side-by-side timing of an implementation row (bench/paired.py): the fastest floor kernel's median and
    # the row's own, over the same alternating rounds; None for floor rows and rows saved before it was timed
    paired_floor_s: float | None = None
    paired_median_s: float | None = None

    @property
    def size(self) -> str:
        return next((s.name for s in SIZES.values() if (s.batch, s.tokens) == (self.batch, self.tokens)),
                    f"{self.batch}x{self.tokens}")

    @property
    def label(self) -> str:
        """The contract and its parameters, as reports head its rows: "reduction (token-mean)"."""
        return f"{self.contract} ({self.parameters})" if self.parameters else self.contract

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for bench in report.get("benchmarks", []):
        info = bench.get("extra_info", {})
        if "kind" not in info or not bench.get("stats"):
            continue
        median = float(bench["stats"]["median"])
        rows.append({"contract": DEFAULT_CONTRACT, "parameters": "", **info, "median_s": median,
                     "gbps": info["bytes"] / median / 1e9})
    return rows


Group = tuple[str, str, str, str, int, int]  # (contract, parameters, device, dtype, batch, tokens)


def _group(row: dict[str, Any]) -> Group:
    return row["contract"], row["parameters"], row["device"], row["dtype"], row["batch"], row["tokens"]


def _best_floors(rows: list[dict[str, Any]]) -> dict[Group, dict[str, Any]]:
    """The fastest floor kernel's row in each group: the floor there (each contract's bytes, its own floor)."""
    floors: dict[Group, dict[str, Any]] = {}
    for row in rows:
        if row["kind"] == "floor" and (_group(row) not in floors or row["gbps"] > floors[_group(row)]["gbps"]):
            floors[_group(row)] = row
    return floors


def records_from_report(report: dict[str, Any]) -> list[Record]:
    """Implementation rows with their floor, preceded by one "floor" row per (contract, device, dtype, size):
    the fastest floor kernel there."""
    rows = _rows(report)
    floors = _best_floors(rows)
    records = []
    for row in rows:
        if row["kind"] == "floor":
            if floors[_group(row)] is not row:
                continue
            name = FLOOR
        else:
            name = row["implementation"]
        floor = floors.get(_group(row))
        floor_gbps = floor["gbps"] if floor else None
        paired_floor, paired_median = row.get("paired_floor_s"), row.get("paired_median_s")
        if paired_floor and paired_median:
            fraction: float | None = paired_floor / paired_median
        else:
            fraction = row["gbps"] / floor_gbps if floor_gbps else None
        records.append(
            Record(
                implementation=name,
                contract=row["contract"],
                parameters=row["parameters"],
                device=row["device"],
                dtype=row["dtype"],
                batch=row["batch"],
                tokens=row["tokens"],
                median_s=row["median_s"],
                bytes=row["bytes"],
                gbps=row["gbps"],
                floor_gbps=floor_gbps,
                fraction_of_floor=fraction,
                paired_floor_s=paired_floor,
                paired_median_s=paired_median,
            )
        )
    return records


def load_records(path: Path) -> list[Record]:
    return records_from_report(json.loads(Path(path).read_text()))


def floor_kernel(report: dict[str, Any], record: Record) -> str | None:
    """Which floor kernel set the floor of a record's group (for the table's floor row)."""
    key = (record.contract, record.parameters, record.device, record.dtype, record.batch, record.tokens)
    best = _best_floors(_rows(report)).get(key)
    return best["implementation"].removeprefix("floor:") if best else None


def write_records(records: list[Record], path: Path) -> None:
    """Atomically, as every report (its folder was checked before the run)."""
    from fuzz.report.files import write_atomically

    write_atomically(str(path), json.dumps([record.as_json() for record in records], indent=2) + "\n")
