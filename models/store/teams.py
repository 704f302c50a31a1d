"""Who may answer a wait beyond the grants on its target (docs/teams.md): its assignees and escalation
levels, written with its park, and delegations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, insert, literal, select

from models.base import utcnow
from models.status import AnswererSource, PrincipalKind
from models.store.sql import ANSWERER, PRIN, Executor, words

if TYPE_CHECKING:  # the park (models.store.steps) writes these rows: no import back at run time
    from models.store.steps import InteractionSpec

_PEOPLE = (PRIN.c.disabled_at.is_(None), PRIN.c.kind.in_(words((PrincipalKind.HUMAN, PrincipalKind.ADMIN))))
_NAMED = select(PRIN.c.name).where(PRIN.c.name.in_(bindparam("names", expanding=True)), *_PEOPLE)


def not_people(session: Executor, names: Sequence[str]) -> list[str]:
    """Of ``names``, those no live human or admin has (they could never answer): what a park refuses."""
    if not names:
        return []
    found = set(session.execute(_NAMED, {"names": list(names)}).scalars())
    return [name for name in names if name not in found]


def _named_rows(iid: str, source: AnswererSource, level: int, names: Sequence[str]) -> Any:
    """Answerer rows for the live people of ``names`` (the park checked them just before)."""
    return select(
        literal(iid), literal(source.value), literal(level), PRIN.c.id, literal(None, ANSWERER.c.target.type),
        literal(utcnow(), ANSWERER.c.at.type),
    ).where(PRIN.c.name.in_(list(names)), *_PEOPLE)  # fmt: skip


_COLUMNS = ["interaction_id", "source", "level", "principal_id", "target", "at"]


def name_answerers(session: Executor, step_id: str, specs: Sequence[InteractionSpec]) -> None:
    """none -> the answerer rows of a step's new waits: each assignee (from the start, level 0) and each
    escalation level k (a target, or named people; answerable once the wait's level reaches k). Written in
    the park's transaction; nothing for waits without these options (no statement at all)."""
    for spec in specs:
        iid = spec.interaction_id(step_id)
        if spec.assignees:
            session.execute(insert(ANSWERER).from_select(
                _COLUMNS, _named_rows(iid, AnswererSource.ASSIGNEE, 0, spec.assignees)))  # fmt: skip
        for level, (_, to) in enumerate(spec.escalate, start=1):
            if isinstance(to, str):
                session.execute(insert(ANSWERER).values(interaction_id=iid, source=AnswererSource.ESCALATION.value,
                                                        level=level, target=to, at=utcnow()))  # fmt: skip
            else:
                session.execute(insert(ANSWERER).from_select(
                    _COLUMNS, _named_rows(iid, AnswererSource.ESCALATION, level, to)))  # fmt: skip
