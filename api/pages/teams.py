"""What the pages say of a team's wait (docs/teams.md): each response as readers may see it and in whose
place it was made ("bo (for ana)"), the progress towards the quorum and what is still needed, the escalation
level reached, the decision's level and the delegations. Values are shown as the API shows them
(``access.redacted``: sensitive fields "***")."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from api.pages import texts
from models import access
from models.access import InteractionView
from models.status import InteractionKind, InteractionStatus
from models.team_views import DelegationView, ResponseView

DECIDED = (InteractionStatus.ANSWERED, InteractionStatus.REJECTED)


@dataclass(frozen=True)
class Team:
    """One wait's team, as a Decisions card or the run page reads it."""

    view: InteractionView

    @property
    def i(self) -> Any:
        return self.view.interaction

    @property
    def permission(self) -> bool:
        return bool(self.i.kind == InteractionKind.PERMISSION)

    @property
    def responses(self) -> list[ResponseView]:
        """Each response of a quorum wait, in order, its value redacted (none for a first-wins wait: its
        one answer is the interaction's own)."""
        if self.i.quorum <= 1:
            return []
        return [replace(r, value=access.redacted(self.i, r.value)) for r in self.view.responses]

    @property
    def delegations(self) -> list[DelegationView]:
        return self.view.delegations

    def handed(self, delegation: DelegationView) -> str:
        """One delegation in words: "ana handed it to bo", or "bo handed ana's place to cy" for a place moved on."""
        if delegation.place != delegation.by:
            return texts.HANDED_ON.format(by=delegation.by, place=delegation.place, to=delegation.to)
        return texts.HANDED.format(by=delegation.by, to=delegation.to)

    @staticmethod
    def who(response: ResponseView) -> str:
        """Who responded, and in whose place when not their own: "bo (for ana)"."""
        if response.place == response.principal:
            return response.principal
        return texts.IN_PLACE.format(who=response.principal, place=response.place)

    @property
    def answerer(self) -> str | None:
        """Who decided, in whose place: "bo (for ana)" (``None`` until decided)."""
        if self.view.answered_by is None:
            return None
        deciding = next((r for r in self.view.responses if r.principal == self.view.answered_by), None)
        return self.who(deciding) if deciding is not None else self.view.answered_by

    def verdict(self, response: ResponseView) -> str:
        """What one response said, in a word: approved or rejected (a permission), else answered."""
        if not self.permission:
            return "answered"
        return "approved" if (response.value or {}).get("approved") else "rejected"

    def _names(self, verdict: str) -> list[str]:
        return [self.who(r) for r in self.responses if self.verdict(r) == verdict]

    @property
    def progress(self) -> str | None:
        """What a quorum wait has: "2 of 3 approved: ana, bo" (and who rejected, when a rejection did not
        decide); ``None`` for a first-wins wait."""
        if self.i.quorum <= 1:
            return None
        verdict = "approved" if self.permission else "answered"
        names = self._names(verdict)
        line = texts.PROGRESS.format(n=len(names), m=self.i.quorum, verdict=verdict)
        line += f": {', '.join(names)}" if names else ""
        rejected = self._names("rejected") if self.permission else []
        return line + (texts.PROGRESS_REJECTED.format(names=", ".join(rejected)) if rejected else "")

    def mine(self, me: str) -> ResponseView | None:
        """``me``'s own response to this quorum wait, if they responded."""
        return next((r for r in self.responses if r.principal == me), None)

    def needed(self, me: str, holds: bool) -> str | None:
        """What a pending quorum wait still needs, and what ``me`` did or may do (``holds``: a place on it):
        "1 more needed; you may approve" / "... ; you approved" / "1 more needed"."""
        if self.i.quorum <= 1 or self.i.status != InteractionStatus.PENDING:
            return None
        have = len(self._names("approved" if self.permission else "answered"))
        line = texts.STILL_NEEDED.format(k=max(self.i.quorum - have, 0))
        mine = self.mine(me)
        if mine is not None:
            return line + texts.YOU_DID.format(verdict=self.verdict(mine))
        if not holds:
            return line
        return line + texts.YOU_MAY.format(act="approve" if self.permission else "answer")

    @property
    def level(self) -> str | None:
        """The escalation level reached and who it brought in: "level 1 reached (team:leads)"."""
        if not self.i.level:
            return None
        chain = (self.i.team or {}).get("escalate") or []
        to = chain[self.i.level - 1].get("to") if self.i.level <= len(chain) else None
        who = ", ".join(to) if isinstance(to, list) else (to or "")
        return texts.LEVEL.format(level=self.i.level, who=who).replace(" ()", "")

    @property
    def decided(self) -> str | None:
        """Who decided a team's wait, in whose place, and at which level: "decided by bo (for ana) at level 1"
        (``None`` until then, and for a first-wins wait never escalated nor delegated: its answer says it all)."""
        if self.i.status not in DECIDED or self.answerer is None:
            return None
        if self.i.quorum <= 1 and not self.i.answered_level and self.answerer == self.view.answered_by:
            return None
        return texts.DECIDED_BY.format(by=self.answerer, level=self.i.answered_level or 0)

    @property
    def summary(self) -> list[str]:
        """The run page's line: progress, decision and level, those it has."""
        return [line for line in (self.progress, self.decided, self.level) if line]

    @property
    def shown(self) -> bool:
        """Whether the wait has anything of a team to show."""
        return bool(self.summary or self.delegations)
