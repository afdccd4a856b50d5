"""How many CPU cores this process may use: its affinity (taskset, a container's cpuset, `--cpus`), not
the host's core count."""

from __future__ import annotations

import os


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
