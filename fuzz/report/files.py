"""Report files: a path checked before any fuzzing (so a run never ends with its verdict lost), and every report
written atomically (a reader never sees half a file)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def unwritable_reason(path: str) -> str | None:
    """Why a report could not be written at `path` (checked before any fuzzing, so a run never ends with its
    verdict lost), or None where it can be: a file in an existing, writable folder, and not a folder itself."""
    if not path:
        return "the path is empty"
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    if os.path.isdir(full):
        return f"{path} is a directory"
    if not os.path.isdir(folder):
        existing = folder
        while not os.path.exists(existing):  # the deepest part of the path that exists: a file, or a folder
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            return f"{existing} is a file, not a folder"
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    if os.path.exists(full) and not os.access(full, os.W_OK):
        return f"{path} exists and is not writable"
    try:  # what write_atomically does first; os.access says yes to root, and to /proc, where it fails
        handle, trial = tempfile.mkstemp(prefix=f".{os.path.basename(full)}.", dir=folder)
    except OSError as error:
        return f"the folder {folder} does not take a new file ({error.strerror or error})"
    os.close(handle)
    os.unlink(trial)
    return None


def clashing_reports(paths: dict[str, str | None]) -> str | None:
    """The options (by name) among `paths` that name the same file, as a sentence, or None: written one after the
    other, the last report would replace the first."""
    by_file: dict[str, list[str]] = {}
    for option, path in paths.items():
        if path:
            by_file.setdefault(os.path.realpath(path), []).append(option)
    clash = next((options for options in by_file.values() if len(options) > 1), None)
    return f"{' and '.join(clash)} name the same file: one report would replace the other" if clash else None


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename: a reader never sees a
    half-written report, and a failed write leaves the old file (if any) as it was."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would make it, not mkstemp's private 0600
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_json(path: str, data: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=2))
