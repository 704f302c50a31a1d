"""Checks of the parts of an outcome (``models.outcome``) the store keeps in columns: each raises
``WorkflowError`` with a sentence naming the problem, before anything commits (a Python body's outcome is
then its own ``Fail``; a remote worker's is refused with 422). ``unanswerable`` is the one that reads the
database: how many could ever answer a Park's waits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from sqlalchemy import Connection, Integer, String, and_, column, func, literal, select, union_all, values
from sqlalchemy.orm import Session

from models.answers import PERMISSION_SCHEMA
from models.jsonsafe import json_problem, text_problem
from models.outcome import InteractionSpec, Permission, Question
from models.status import InteractionKind, PrincipalKind
from models.tables import Grant, Principal
from parkway.errors import WorkflowError

MAX_EXPIRES_IN_S = 366 * 24 * 3600  # a wait longer than a year is a unit mistake, not a plan


def text_ok(value: Any, what: str, *, max_len: int | None = 200) -> None:
    """A name or text the store keeps in a column: a non-empty string it can hold."""
    if not isinstance(value, str) or not value:
        raise WorkflowError(f"{what} must be a non-empty string")
    problem = text_problem(value)
    if problem is not None:
        raise WorkflowError(f"{what} {problem}")
    if max_len is not None and len(value) > max_len:
        raise WorkflowError(f"{what} is longer than {max_len} characters")


def expires_in_ok(key: str, seconds: Any) -> None:
    """``None`` (no expiry) or a finite number of seconds in (0, 366 days]."""
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise WorkflowError(f"interaction {key}: expires_in must be a number of seconds")
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_EXPIRES_IN_S:
        raise WorkflowError(
            f"interaction {key}: expires_in must be positive seconds, at most {MAX_EXPIRES_IN_S} (366 days),"
            f" not {seconds!r}"
        )


def schema_ok(key: str, schema: Any) -> None:
    """A JSON Schema object the store can hold and ``jsonschema`` accepts (``check_schema``)."""
    if not isinstance(schema, dict):
        raise WorkflowError(f"question {key} needs a JSON Schema object, not {type(schema).__name__}")
    problem = json_problem(schema)
    if problem is not None:
        raise WorkflowError(f"the schema of question {key} is not JSON-serializable ({problem})")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise WorkflowError(f"question {key} has an invalid JSON Schema: {exc.message}") from None
    except Exception as exc:  # a schema the checker cannot even walk
        raise WorkflowError(f"question {key} has an invalid JSON Schema ({type(exc).__name__})") from None


def json_ok(value: Any, what: str) -> None:
    problem = json_problem(value)
    if problem is not None:
        raise WorkflowError(f"{what} is not JSON-serializable ({problem})")


REJECT_POLICIES = ("first", "unreachable")


def _seconds(key: str, what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise WorkflowError(f"interaction {key}: {what} must be positive seconds, not {value!r}")
    return float(value)


def _names(key: str, what: str, names: Any) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise WorkflowError(f"interaction {key}: {what} must be a list of principal names")
    for name in names:
        text_ok(name, f"a name in {what} of interaction {key}")
    if len(set(names)) != len(names):
        raise WorkflowError(f"interaction {key}: {what} names a principal twice")
    return list(names)


def _escalation(key: str, levels: Any, expires_in: float | None) -> list[tuple[float, str | list[str]]]:
    """``[(after_seconds, target or [names]), ...]``, each after the one before and before the expiry."""
    if isinstance(levels, str) or not isinstance(levels, Sequence):
        raise WorkflowError(f"interaction {key}: escalate must be a list of (after_seconds, target) pairs")
    chain: list[tuple[float, str | list[str]]] = []
    for level in levels:
        if not isinstance(level, Sequence) or isinstance(level, str) or len(level) != 2:
            raise WorkflowError(f"interaction {key}: each escalation level is a pair (after_seconds, target)")
        after = _seconds(key, "an escalation's after", level[0])
        if chain and after <= chain[-1][0]:
            raise WorkflowError(f"interaction {key}: escalation levels must come in increasing order of time")
        if expires_in is not None and after >= expires_in:
            raise WorkflowError(
                f"interaction {key}: an escalation level at {after:g}s comes after its expiry ({expires_in:g}s)"
            )
        to = level[1]
        if isinstance(to, str):
            text_ok(to, f"the escalation target of interaction {key}")
            chain.append((after, to))
        else:
            chain.append((after, _names(key, "an escalation level", to)))
    return chain


def team_fields(item: Any, *, permission: bool) -> dict[str, Any]:
    """The ``InteractionSpec`` fields of a ``Question``'s or ``Permission``'s team options, checked."""
    key = item.key
    quorum = item.quorum
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        raise WorkflowError(f"interaction {key}: quorum must be a whole number of responses, at least 1")
    assignees = _names(key, "assignees", item.assignees)
    if item.assignees_only and not assignees:
        raise WorkflowError(f"interaction {key}: assignees_only needs assignees")
    reminders = [_seconds(key, "remind_after", s) for s in item.remind_after]
    if reminders != sorted(set(reminders)):
        raise WorkflowError(f"interaction {key}: remind_after must be increasing delays")
    escalate = _escalation(key, item.escalate, item.expires_in)
    reject = getattr(item, "reject", "first")
    if reject not in REJECT_POLICIES or (reject != "first" and not permission):
        raise WorkflowError(f"interaction {key}: reject must be one of {', '.join(REJECT_POLICIES)} (permissions)")
    if item.assignees_only and all(isinstance(to, list) for _, to in escalate):
        # Only named principals can ever answer: a quorum they cannot reach is refused now.
        could = set(assignees).union(*(to for _, to in escalate if isinstance(to, list)))
        if quorum > len(could):
            raise WorkflowError(
                f"interaction {key}: quorum {quorum} is more than the {len(could)} principals who could ever answer"
            )
    justify = getattr(item, "justify", False)
    if not isinstance(justify, bool):
        raise WorkflowError(f"interaction {key}: justify must be true or false")
    return {"quorum": quorum, "assignees": assignees, "assignees_only": bool(item.assignees_only),
            "remind_after": reminders, "escalate": escalate, "reject": reject, "justify": justify}  # fmt: skip


def _who_is_asked(items: Sequence[Any]) -> list[tuple[int, str, str]]:
    """``(wait, "name" or "target", value)`` for each principal a Park's waits name and each target whose
    grants may answer (the wait's own, unless its assignees alone may; its escalation levels')."""
    rows: list[tuple[int, str, str]] = []
    for k, item in enumerate(items):
        rows += [(k, "name", name) for name in item.assignees]
        rows += [] if item.assignees_only else [(k, "target", item.target)]
        for _, to in item.escalate:
            rows += [(k, "target", to)] if isinstance(to, str) else [(k, "name", name) for name in to]
    return rows


def _unanswerable_read(rows: list[tuple[int, str, str]]) -> Any:
    """One statement: per wait, the live people (humans, admins) who could ever answer it, counted once
    however many ways (``people``), and the names that are no live person's (``missing``)."""
    asked = values(column("wait", Integer), column("kind", String), column("value", String), name="asked").data(rows)
    live = and_(
        Principal.disabled_at.is_(None), Principal.kind.in_([PrincipalKind.HUMAN.value, PrincipalKind.ADMIN.value])
    )
    named = select(asked.c.wait, asked.c.value, Principal.id).outerjoin(
        Principal, and_(asked.c.kind == literal("name"), Principal.name == asked.c.value, live)
    )
    granted = (
        select(asked.c.wait, literal(None, String), Grant.principal_id)
        .join(Grant, and_(asked.c.kind == literal("target"), Grant.target == asked.c.value, Grant.revoked_at.is_(None)))
        .join(Principal, and_(Principal.id == Grant.principal_id, live))
    )
    each = union_all(named.where(asked.c.kind == literal("name")), granted).subquery("each")
    missing = func.array_agg(each.c[1]).filter(and_(each.c[1].is_not(None), each.c[2].is_(None)))
    return select(each.c[0], func.count(each.c[2].distinct()), missing).group_by(each.c[0]).order_by(each.c[0])


def unanswerable(session: Connection | Session, items: Sequence[Question | Permission]) -> str | None:
    """A sentence naming a wait of a Park whose quorum is larger than the live people who could ever answer
    it (granted on its target, unless its assignees alone may, or on an escalation target; an assignee;
    named by a level), read in one statement; ``None`` otherwise, and for a Park that names no one and needs
    no quorum. A Park naming one who is no live person is the store's to refuse (``store.park``, with that
    name): it is not judged here."""
    rows = _who_is_asked(items)
    if not any(kind == "name" for _, kind, _ in rows) and all(item.quorum <= 1 for item in items):
        return None
    found = {wait: (people, missing or []) for wait, people, missing in session.execute(_unanswerable_read(rows))}
    if any(missing for _, missing in found.values()):
        return None
    for k, item in enumerate(items):
        people = found.get(k, (0, []))[0]
        if item.quorum > people:
            return (f"interaction {item.key}: quorum {item.quorum} is more than the {people} principals who could"
                    " ever answer (live people granted on its targets, assignees, escalation levels)")  # fmt: skip
    return None


def interaction_specs(items: Sequence[Question | Permission]) -> list[InteractionSpec]:
    """Validate a Park's interactions; raises ``WorkflowError`` with a sentence naming the problem."""
    if not items:
        raise WorkflowError("Park needs at least one Question or Permission")
    specs: list[InteractionSpec] = []
    keys: set[str] = set()
    for item in items:
        if not isinstance(item, Question | Permission):
            raise WorkflowError(f"Park interactions must be Question or Permission, not {type(item).__name__}")
        text_ok(item.key, "an interaction key")
        if item.key in keys:
            raise WorkflowError(f"interaction key {item.key!r} is used twice in one Park")
        keys.add(item.key)
        if not item.target:
            raise WorkflowError(f"interaction {item.key} needs a target")
        text_ok(item.target, f"the target of interaction {item.key}")
        expires_in_ok(item.key, item.expires_in)
        if isinstance(item, Question):
            text_ok(item.prompt, f"the prompt of question {item.key}", max_len=None)
            schema_ok(item.key, item.schema)
            json_ok(list(item.sensitive), f"the sensitive fields of question {item.key}")
            specs.append(
                InteractionSpec(
                    key=item.key,
                    kind=InteractionKind.QUESTION,
                    target=item.target,
                    prompt=item.prompt,
                    schema=item.schema,
                    sensitive=list(item.sensitive),
                    expires_in=item.expires_in,
                    **team_fields(item, permission=False),
                )
            )
        else:
            resources = [str(r) for r in item.resources]
            if not resources or not item.action:
                raise WorkflowError(f"permission {item.key} needs an action and at least one resource")
            text_ok(item.action, f"the action of permission {item.key}")
            json_ok(resources, f"the resources of permission {item.key}")
            specs.append(
                InteractionSpec(
                    key=item.key,
                    kind=InteractionKind.PERMISSION,
                    target=item.target,
                    prompt=f"Allow {item.action} on {', '.join(resources)}?",
                    schema=PERMISSION_SCHEMA,
                    action=item.action,
                    resources=sorted(set(resources)),
                    expires_in=item.expires_in,
                    id=item.request_id,
                    **team_fields(item, permission=True),
                )
            )
    return specs
