"""Where the suite's child processes (workers, torch ranks) come from: multiprocessing's fork server, a fresh
single-threaded process that imports the heavy modules once and then forks each child in milliseconds. Never a
fork of the calling process itself: it may hold threads (torch's, JAX's, a user's). Where a platform has no
fork server (Windows), children are spawned: they import those modules themselves."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
from collections.abc import Sequence
from typing import Any


def fork_server_context(preload: Sequence[str]) -> Any:
    """A multiprocessing context whose children fork from the fork server, told to import `preload` (module
    names; one that fails to import is skipped) when it starts. The server starts now, so its imports run while
    this process goes on (the first child's start waits for them). A server this process already runs keeps its
    own preloads, and the children import the rest themselves. The server starts with this process's environment
    at that moment, so process-wide settings made before (`prepare_process`) hold in it."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(dict.fromkeys(preload)))
    multiprocessing.forkserver.ensure_running()
    return context
