"""Whether the workflow modules' references resolve (``parkway check``, ``parkway up``, a worker's start).

Reads the source of the modules ``PARKWAY_IMPORTS`` names and of every module that registered a step or a
continuation, finds each ``Park(continuation=...)`` and ``Next(step, ...)``, and resolves what it names —
a string, a module-level constant, or a decorated function (``tasks.references``) — against the registry
of this process after the import. A name computed at run time (a parameter, a payload value, an f-string)
cannot be read here: it is counted, and judged when the body returns it (``check_outcome``, the fleet).
"""

from __future__ import annotations

import ast
import difflib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from models import store
from models.status import ContinuationKind
from parkway.db import single_statement
from parkway.errors import WorkflowError
from parkway.settings import get_settings
from tasks import registry
from tasks.outcomes import Next, Park
from tasks.references import key_of

log = logging.getLogger("parkway.worker")

# What each outcome names, by keyword or as its first argument.
NAMES = {"Park": ("continuation", ContinuationKind.RESUME), "Next": ("step", ContinuationKind.START)}
OUTCOMES = {"Park": Park, "Next": Next}
UNRESOLVED = object()  # a name the module's globals do not hold (a local, a parameter)


@dataclass(frozen=True)
class Reference:
    """One ``Park``/``Next`` found in a module's source: the key it names (``None``: computed at run time,
    or not a key at all) and, when it does not resolve, why."""

    path: str
    line: int
    outcome: str  # Park or Next
    kind: ContinuationKind
    key: str | None
    problem: str | None = None

    def line_text(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


@dataclass
class Report:
    modules: list[str] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)

    @property
    def problems(self) -> list[Reference]:
        return [r for r in self.references if r.problem is not None]

    def summary(self) -> str:
        dynamic = [r for r in self.references if r.key is None and r.problem is None]
        resolved = len(self.references) - len(dynamic) - len(self.problems)
        line = (
            f"{_count(len(self.modules), 'module')}, {_count(len(registry.keys(ContinuationKind.START)), 'step')}, "
            f"{_count(len(registry.keys(ContinuationKind.RESUME)), 'continuation version')}; "
            f"{_count(resolved, 'reference')} {'resolves' if resolved == 1 else 'resolve'}"
        )
        if dynamic:
            where = ", ".join(f"{r.path}:{r.line}" for r in dynamic)
            line += f" ({len(dynamic)} computed at run time, not checked: {where})"
        return line


def count_text(problems: list[Reference]) -> str:
    """``2 references of the workflow modules do not resolve``."""
    verb = "does" if len(problems) == 1 else "do"
    return f"{_count(len(problems), 'reference')} of the workflow modules {verb} not resolve"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def check_workflows() -> Report:
    """Import ``PARKWAY_IMPORTS`` (as the worker does) and read every reference of the workflow modules."""
    registry.import_workflows()
    report = Report(modules=_workflow_modules())
    for name in report.modules:
        module = sys.modules[name]
        source = _source(module)
        if source is not None:
            report.references.extend(sorted(_references(module, *source), key=lambda r: r.line))
    return report


def _workflow_modules() -> list[str]:
    """The modules of ``PARKWAY_IMPORTS`` and those that registered a body (Parkway's own left out)."""
    names = set(get_settings().import_modules) | registry.modules()
    return sorted(n for n in names if n in sys.modules and n.split(".")[0] != "tasks")


def _source(module: ModuleType) -> tuple[str, ast.Module] | None:
    """The module's file as shown (relative to the current directory when under it) and its syntax tree."""
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    path = Path(file).resolve()
    shown = str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)
    return shown, ast.parse(path.read_text(), filename=str(path))


def _references(module: ModuleType, path: str, tree: ast.Module) -> Iterator[Reference]:
    namespace = vars(module)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        outcome = _outcome_name(node.func, namespace)
        if outcome is None:
            continue
        keyword, kind = NAMES[outcome]
        arg = next((k.value for k in node.keywords if k.arg == keyword), node.args[0] if node.args else None)
        if arg is None:
            continue
        key, problem = _resolve_key(arg, namespace, kind)
        if key is not None:
            problem = _unregistered(key, kind)
        yield Reference(path, node.lineno, outcome, kind, key, f"{outcome} {problem}" if problem else None)


def _outcome_name(func: ast.expr, namespace: dict[str, Any]) -> str | None:
    """``Park`` or ``Next`` when the call makes one (by the object its name holds, else by the name)."""
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    found = _lookup(func, namespace)
    for outcome, cls in OUTCOMES.items():
        if found is cls or (found is UNRESOLVED and name == outcome):
            return outcome
    return None


def _lookup(expr: ast.expr, namespace: dict[str, Any]) -> Any:
    """What a name or dotted name holds in the module's globals after its import, or ``UNRESOLVED``."""
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id, UNRESOLVED)
    if isinstance(expr, ast.Attribute):
        owner = _lookup(expr.value, namespace)
        return UNRESOLVED if owner is UNRESOLVED else getattr(owner, expr.attr, UNRESOLVED)
    return UNRESOLVED


def _resolve_key(arg: ast.expr, namespace: dict[str, Any], kind: str) -> tuple[str | None, str | None]:
    """``(key, None)``, ``(None, problem)`` for what names no key, ``(None, None)`` for a name computed at run time."""
    value = arg.value if isinstance(arg, ast.Constant) else _lookup(arg, namespace)
    if value is UNRESOLVED:
        return None, None
    what = "continuation" if kind == ContinuationKind.RESUME else "step"
    try:
        key = key_of(value, kind)
    except WorkflowError as exc:
        return None, f"names {exc}"
    if not isinstance(key, str):
        return None, f"names {what} {ast.unparse(arg)}, which is {type(key).__name__}, not a name"
    return key, None


def _unregistered(key: str, kind: str) -> str | None:
    """Why ``key`` does not resolve in this process's registry, or ``None``."""
    if kind == ContinuationKind.START:
        if registry.has_step(key):
            return None
        near = difflib.get_close_matches(key, sorted(registry.keys(kind)), n=1, cutoff=0.8)
        return f"names step {key}, which is not registered" + (f" (did you mean {near[0]}?)" if near else "")
    name, at, _ = key.partition("@")
    if not at:
        return f"names continuation {key}, which is not name@version"
    if registry.has_continuation(key):
        return None
    versions = sorted(k for k in registry.keys(kind) if k.partition("@")[0] == name)
    registered = f"registered: {', '.join(versions)}" if versions else f"no version of {name} is registered"
    return f"names continuation {key}, which is not registered ({registered})"


def unserved(problems: list[Reference]) -> list[Reference]:
    """The problems no live worker of the fleet resolves: a key this process lacks may be run by another
    worker (a fleet split by module; ``tasks.worker`` hands such work on), as at run time."""
    left = []
    for problem in problems:
        fleet = None
        if problem.key is not None:
            with single_statement() as conn:
                fleet = store.serving(conn, problem.kind, problem.key)
        if fleet is None or not fleet.served:
            left.append(problem)
        else:
            runner = fleet.node or "a remote worker"
            log.info("%s; live worker %s runs it", problem.line_text(), runner, extra={"action": "check"})
    return left
