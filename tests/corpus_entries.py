"""The public corpus' entries as the corpus tests read them: each file's metadata, taken from its source (not
imported: a corpus file may need a framework this machine lacks, and collection must not run it).

Every file assigns FRAMEWORK (a `check --framework` choice, or a `--sharded` engine in tests/corpus/sharded/)
and EXPECT ("reject", "accept", "reject-gradients"); a file of another contract than the default says so with
CONTRACT and that contract's declared parameters (REDUCTION, ROWS, L_MAX; for the accumulation contract DP_REDUCE,
BACKWARD_SCALE, and RANKS = True for the rank form on torch.distributed), MASKED_VALUES where its padding is
finite by construction, and EXPLAINS, a phrase the report's explanation of the bug must contain."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent / "corpus"
FUNCTION = "loss_normalization"  # the function every corpus file defines
FIELDS = ("FRAMEWORK", "EXPECT", "CONTRACT", "REDUCTION", "ROWS", "L_MAX", "MASKED_VALUES", "EXPLAINS", "DP_REDUCE",
          "BACKWARD_SCALE", "RANKS")


def metadata(path: Path) -> dict[str, Any]:
    """The FIELDS the file assigns constants at module level."""
    values = {}
    for node in ast.parse(path.read_text()).body:
        name = node.targets[0].id if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) else ""
        if name in FIELDS and isinstance(node.value, ast.Constant):
            values[name] = node.value.value
    return values


def corpus_entries(folder: Path = CORPUS) -> list[tuple[Path, dict[str, Any]]]:
    """(path, metadata) of every corpus file in `folder` (not its subfolders), in name order."""
    return sorted((path, metadata(path)) for path in folder.glob("*.py") if path.name != "__init__.py")


def check_options(meta: dict[str, Any]) -> dict[str, Any]:
    """The `fuzz.check` keywords a file's declared contract and domain make."""
    options = {"reduction": meta.get("REDUCTION"), "rows": meta.get("ROWS"), "l_max": meta.get("L_MAX"),
               "masked_values": meta.get("MASKED_VALUES")}
    if meta.get("CONTRACT") == "accumulation":
        options.update(accumulation=True, ranks=meta.get("RANKS"), dp_reduce=meta.get("DP_REDUCE"),
                       backward_scale=meta.get("BACKWARD_SCALE"))
    return {key: value for key, value in options.items() if value is not None}
