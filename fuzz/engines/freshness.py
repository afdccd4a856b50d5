"""Whether a process kept between checks (the torch rank pools, the JAX mesh process) still runs the user's code as
it is on disk.

Those processes outlive a check: a pytest session or a notebook runs many checks in one Python process, and the
user edits the function, or a module it imports, between two of them. A process that imported the old file would
judge the old code: a false alarm on the fixed function. So each process reports, with every reply, the Python
files it has imported from outside the Python installation (the user's modules, an editable install, a checkout)
with their size and modification time as it first saw them; before its next example the parent compares them with
the disk, and a process that imported a file changed since is replaced by a fresh one, which imports everything
anew (reloading in place would run a module's import-time registrations twice, and leave the functions loaded
before bound to the new globals).
"""

from __future__ import annotations

import os
import sys

Stamp = tuple[int, int]  # a file's size and modification time (ns)
IMPORTED = "imported"  # the key of a reply that carries the process's newly imported files

# The Python installation: the standard library and site-packages (a virtual environment's too) are never edited
# between two checks.
_INSTALLED = tuple(sorted({os.path.join(prefix, "") for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                                   sys.base_exec_prefix)}))


def _stamp(path: str) -> Stamp | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


class ImportedFiles:
    """The user's files a process imported, as it first saw them: the process side collects them (`new`), the
    parent side accumulates them (`add`) and compares them with the disk (`changed`)."""

    def __init__(self) -> None:
        self.files: dict[str, Stamp] = {}
        self.modules_seen = 0  # how many modules the process had at the last look

    def new(self) -> dict[str, Stamp]:
        """The user's files this process imported since the last call, with their stamps (recorded here). Called
        after every example: it looks through the modules only when there are more of them (an import happened)."""
        found: dict[str, Stamp] = {}
        if len(sys.modules) == self.modules_seen:
            return found
        self.modules_seen = len(sys.modules)
        for module in list(sys.modules.values()):  # a copy: an import may run in another thread
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and path not in self.files and not path.startswith(_INSTALLED):
                stamp = _stamp(path)
                if stamp is not None:
                    found[path] = self.files[path] = stamp
        return found

    def add(self, files: dict[str, Stamp]) -> None:
        for path, stamp in files.items():
            self.files.setdefault(path, stamp)

    def changed(self) -> list[str]:
        """The files that differ on disk from what the process imported."""
        return [path for path, stamp in self.files.items() if _stamp(path) != stamp]
