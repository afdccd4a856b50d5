"""The public corpus' entries as the corpus tests read them: each file's FRAMEWORK and EXPECT, taken from its
source (not imported: a corpus file may need a framework this machine lacks, and collection must not run it)."""

from __future__ import annotations

import ast
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
FUNCTION = "loss_normalization"  # the function every corpus file defines


def metadata(path: Path) -> dict[str, str]:
    """FRAMEWORK and EXPECT, where the file assigns them string constants at module level."""
    values = {}
    for node in ast.parse(path.read_text()).body:
        name = node.targets[0].id if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) else ""
        if name in ("FRAMEWORK", "EXPECT") and isinstance(node.value, ast.Constant):
            values[name] = node.value.value
    return values


def corpus_entries(folder: Path = CORPUS) -> list[tuple[Path, dict[str, str]]]:
    """(path, metadata) of every corpus file in `folder` (not its subfolders), in name order."""
    return sorted((path, metadata(path)) for path in folder.glob("*.py") if path.name != "__init__.py")
