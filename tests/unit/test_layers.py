"""Layers point inward (issue 18): read from the source, not by importing it.

kernel (``parkway/``) ← ``models/`` ← ``tasks/`` ← ``beat/``, ``api/`` ← the CLI (``parkway.cli``, which owns
the demo). Every ``import`` counts, inside functions too; only ``if TYPE_CHECKING:`` blocks are left out
(they never run). No first-party import cycle either (``KNOWN_CYCLES`` names any still to break).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("parkway", "models", "tasks", "beat", "api")
CLI = (  # the CLI and its demo
    "parkway.cli",
    "parkway.cli_bootstrap",
    "parkway.cli_grants",
    "parkway.cli_migrate",
    "parkway.cli_up",
    "parkway.cli_webhooks",
    "parkway.cli_handlers",
    "parkway.cli_workers",
    "parkway.cli_check",
    "parkway.cli_decisions",
    "parkway.children",
    "parkway.supervisor",
    "parkway.demo",
    "parkway.demo_narrator",
    "parkway.demo_stack",
    "parkway.demo_workflows",
)

# layer → the layers its modules may import (besides their own).
ALLOWED = {
    "kernel": set(),
    "models": {"kernel"},
    "tasks": {"kernel", "models"},
    "beat": {"kernel", "models", "tasks"},
    "api": {"kernel", "models", "tasks"},
    "cli": {"kernel", "models", "tasks", "beat", "api"},
}

# Cycles still to break, each with why it is not a helper move (none left today): keep it empty.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def layer(module: str) -> str:
    if module in CLI:
        return "cli"
    top = module.split(".")[0]
    return "kernel" if top == "parkway" else top


def first_party(name: str) -> str | None:
    """The module ``name`` loads (``a.b.C`` is ``a.b`` when ``C`` is a name in it), or ``None``."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports(module: str) -> set[str]:
    """The first-party modules ``module`` imports at run time."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for name in names:
            target = first_party(name)
            if target is not None and target != module:
                found.add(target)
    return found


GRAPH = {module: imports(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
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


def test_the_analysis_sees_the_code() -> None:
    assert {"parkway.cli", "parkway.tokens", "models.store", "tasks.celery_app", "beat.sweep", "api.app"} <= set(
        MODULES
    )
    assert "beat.sweep" in GRAPH["parkway.cli"]  # a function-level import
    assert "tasks.celery_app" in GRAPH["beat.sweep"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_each_layer_imports_only_inner_layers(source: str) -> None:
    outward = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if layer(module) == source
        for target in targets
        if layer(target) != source and layer(target) not in ALLOWED[source]
    )
    assert outward == []


def test_only_the_cli_imports_the_cli_and_the_demo() -> None:
    assert sorted(f"{m} imports {t}" for m, ts in GRAPH.items() if layer(m) != "cli" for t in ts if t in CLI) == []


def test_no_import_cycle_beyond_the_known_ones() -> None:
    found = set(cycles(GRAPH))
    assert sorted(map(sorted, found - KNOWN_CYCLES)) == []  # e.g. [["tasks.sdk", "tasks.tools"]] before issue 18
    assert sorted(map(sorted, KNOWN_CYCLES - found)) == [], "a known cycle is gone: take it off KNOWN_CYCLES"
