"""The package's import graph, read from the source with :mod:`ast`: no circles, and layers point only down.

``bargein/values.py`` is the ground floor and imports nothing of bargein; the audio helpers, the listening
policy, the turn core and the metrics speak in its values and never import the engines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bargein"

LOWER_LAYERS = ("bargein.audio", "bargein.session.core", "bargein.metrics")
"""Packages below the engines: they may import the ground floor, never ``bargein.engines``."""


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The bargein modules ``name`` imports, anywhere in its body (function-level and TYPE_CHECKING too)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            # ``from package import module`` imports that module; ``from module import name`` the module itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _graph() -> dict[str, set[str]]:
    modules = _module_names()
    return {name: set(_imported(name, path, modules)) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_finder_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]


def test_the_package_has_no_import_circles() -> None:
    assert [sorted(circle) for circle in _circles(_graph())] == []


def test_lower_layers_do_not_import_the_engines() -> None:
    graph = _graph()
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                    if source.startswith(LOWER_LAYERS) and target.startswith("bargein.engines"))
    assert upward == []


def test_the_ground_floor_imports_nothing_of_bargein() -> None:
    graph = _graph()
    assert graph["bargein.values"] == set()
    assert graph["bargein.weights"] == set()


def _top_level(name: str) -> str:
    """The layer a module belongs to: its top-level part of bargein (``bargein.session``, ``bargein.config``)."""
    return ".".join(name.split(".")[:2])


def test_the_layers_point_down_only() -> None:
    """Taken whole, bargein's top-level packages and modules import each other one way only: two layers that
    import each other (an arrow back up, even one only for type checking) form a circle here."""
    layers: dict[str, set[str]] = {}
    for source, targets in _graph().items():
        layers.setdefault(_top_level(source), set()).update(
            _top_level(target) for target in targets if _top_level(target) != _top_level(source))
    assert [sorted(circle) for circle in _circles(layers)] == []
