"""The layers around the package, read from the source with :mod:`ast`: ``testdata`` at the bottom, then
``bench`` (its harness, then the benchmarks), then ``training``; tests may import any of them, none imports tests.

No module reaches the others by editing ``sys.path``: all run as modules from the repository root
(``python -m bench.latency.first_audio``, ``python -m training.fit_listening``).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("testdata", "bench", "training", "tests")
MAY_NOT_IMPORT = {
    "testdata": ("bench", "training", "tests"),
    "bench": ("training", "tests"),
    "training": ("tests",),
}
"""What each tree must never import: the arrows point down only."""


def _imports(path: Path) -> set[str]:
    """The top-level names of everything ``path`` imports, anywhere in its body."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _modules(tree: str) -> dict[str, Path]:
    modules = {}
    for path in (ROOT / tree).rglob("*.py"):
        if "node_modules" in path.parts or ".venv" in path.parts[0]:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _graph(trees: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``trees`` it imports (``from a.b import c`` counts ``a.b.c`` if that is one)."""
    modules = {name: path for tree in trees for name, path in _modules(tree).items()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for target in _imports(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


@pytest.mark.parametrize("tree", sorted(MAY_NOT_IMPORT))
def test_a_tree_imports_only_what_lies_below_it(tree: str) -> None:
    graph = _graph(TREES)
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() if source.startswith(f"{tree}.")
                    for target in targets if target.split(".")[0] in MAY_NOT_IMPORT[tree])
    assert upward == []


def test_bench_training_and_testdata_have_no_import_circles() -> None:
    graphlib.TopologicalSorter(_graph(("testdata", "bench", "training"))).prepare()  # CycleError names the circle


def test_the_circle_finder_sees_a_circle() -> None:
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()


def test_nothing_edits_sys_path() -> None:
    editing = sorted(str(path.relative_to(ROOT)) for tree in TREES for path in _modules(tree).values()
                     if "sys.path." in path.read_text(encoding="utf-8") and path != Path(__file__).resolve())
    assert editing == []
