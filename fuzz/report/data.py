"""What a report says, gathered once for the JSON and the HTML report: the run's facts, the versions and the
machine, the verdict and every cell (the HTML page adds the figures that explain the contracts it checked)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Sequence
from typing import Any

from fuzz.report.results import CellResult
from fuzz.version import VERSION


def report_data(results: Sequence[CellResult], meta: dict[str, Any]) -> dict[str, Any]:
    """Everything a report says: the run's facts (`meta`, the versions and the machine), the verdict and every
    cell: what the JSON and the HTML report both carry."""
    return {**meta, **environment(), "ok": all(cell.ok for cell in results),
            "cells": [cell.as_json() for cell in results]}


def environment() -> dict[str, Any]:
    """The versions and the machine a verdict was reached on (a framework not yet imported is not imported)."""
    versions = {"lossnorm-difftest": VERSION, "python": platform.python_version()}
    for name in ("numpy", "torch", "jax", "jaxlib", "triton", "hypothesis", "array-api-strict"):
        try:  # the installed distribution's version, read without importing it
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    machine = {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()}
    return {"versions": versions, "machine": machine}
