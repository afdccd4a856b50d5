"""The architecture as docs/architecture.md states it: no import cycle among the project's modules, nothing
imports upward (reference < impls < fuzz < bench), and no function's names outside its contract's module and
its implementations: the fuzzer, the benchmarks and the framework adapters take the contract as a value.

Imports are read from the source (every `import`, in functions too, except those only for type checkers),
so a cycle hidden behind a function-level import fails here as well."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("reference", "impls", "fuzz", "bench")  # each may import only itself and the ones before it (bench
# uses fuzz's report files, its TARGET loader and its check of a TARGET's first call)
ALLOWED = {"reference": {"reference"}, "impls": {"reference", "impls"}, "fuzz": {"reference", "impls", "fuzz"},
           "bench": {"reference", "impls", "fuzz", "bench"}}


def _modules() -> dict[str, Path]:
    found = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(path: Path) -> set[str]:
    """The project modules a module imports (a `from package import name` of a submodule counts as that one)."""
    tree = ast.parse(path.read_text())
    skipped = {id(child) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
               for child in ast.walk(node)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name in MODULES}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a cycle of imports."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_projects_modules():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle():  # the test above can fail
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("layer", LAYERS)
def test_nothing_imports_upward(layer):
    upward = {(name, target) for name, targets in GRAPH.items() if name.split(".")[0] == layer
              for target in targets if target.split(".")[0] not in ALLOWED[layer]}
    assert upward == set()


def _contract_names() -> set[str]:
    from reference.contracts import CONTRACT_NAMES, get_contract

    names = set()
    for name in CONTRACT_NAMES:
        contract = get_contract(name)
        names |= set(contract.input_names) | set(contract.output_names)
    return names


# Where a function's names may appear: its contract's module, the implementations, the tests, the docs.
CONTRACT_FREE = ("fuzz", "bench", "impls/frameworks")


def _spellings(path: Path, names: set[str]) -> list[str]:
    """Where a module spells a contract's names: an identifier-like name (token_mask) anywhere in its text, a
    one-word name (loss) where code uses it as a name: an attribute (`exact.loss`) or a key (`values["loss"]`).
    A one-word name in prose ("the combined loss") is English, not the contract."""
    compound = sorted(name for name in names if "_" in name)
    pattern = re.compile(r"\b(" + "|".join(compound) + r")\b")
    lines = path.read_text().splitlines()
    found = {number for number, line in enumerate(lines, 1) if pattern.search(line)}
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and node.attr in names) or (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names):
            found.add(node.lineno)
    return [f"{path.relative_to(ROOT)}:{number}: {lines[number - 1].strip()}" for number in sorted(found)]


def test_the_spelling_finder_finds_both_kinds():  # the test below can fail
    import tempfile

    with tempfile.TemporaryDirectory(dir=ROOT) as folder:
        path = Path(folder) / "module.py"
        path.write_text('x = exact.loss\ny = values["loss"]\n# the combined loss\nz = 1  # token_mask\n')
        assert [line.split(":")[1] for line in _spellings(path, {"loss", "token_mask"})] == ["1", "2", "4"]


@pytest.mark.parametrize("folder", CONTRACT_FREE)
def test_no_contract_names_in_the_harness(folder):
    """The fuzzer, the benchmarks and the adapters ask the contract; they never spell its inputs or outputs."""
    names = _contract_names()
    found = [hit for path in sorted((ROOT / folder).rglob("*.py")) for hit in _spellings(path, names)]
    assert found == []
