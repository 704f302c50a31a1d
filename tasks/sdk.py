"""The workflow SDK: declare steps and continuations, start runs, answer and cancel.

What a workflow module needs as it is imported (``step``, ``continuation``, the outcomes, ``Context``) is
defined here without the store, SQLAlchemy or Celery; what starts, answers and cancels runs
(``tasks.sdk_calls``) and the ``Answer`` a continuation receives are imported on first use, so a process
that only declares workflows (``parkway run start`` checking a payload) stays quick."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, TypeVar

from models import jsonsafe
from models.outcome import Complete, Fail, Next, Park, Question
from models.status import ContinuationKind
from parkway.errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidAnswer,
    InvalidPayload,
    NotFound,
    NotRegistered,
    WorkflowError,
)
from tasks import references, registry
from tasks.tooltypes import Permission, PermissionRejected, PossiblyRan, ToolFailed

if TYPE_CHECKING:
    from models.store import Answer
    from tasks.sdk_calls import answer, cancel, delegate, start_run
    from tasks.sdk_calls import request_digest as request_digest
    from tasks.sdk_calls import response_digest as response_digest

__all__ = [
    "Answer",
    "Complete",
    "Conflict",
    "Context",
    "Fail",
    "Forbidden",
    "Gone",
    "InvalidAnswer",
    "InvalidPayload",
    "Next",
    "NotFound",
    "NotRegistered",
    "Park",
    "Permission",
    "PermissionRejected",
    "PossiblyRan",
    "Question",
    "ToolFailed",
    "answer",
    "cancel",
    "continuation",
    "delegate",
    "start_run",
    "step",
]

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------- declaring


def step(name: str, *, payload: Any = None) -> Callable[[F], F]:
    """Register ``fn(ctx, payload)`` as the body of step ``name`` (a workflow is its first step). With
    ``payload`` (a pydantic model, or a JSON Schema as a dict) a start whose payload does not match is refused
    (``InvalidPayload``, nothing stored) and the body receives the model's instance (or the checked dict)."""

    def decorate(fn: F) -> F:
        registry.register_step(name, fn, payload)
        references.mark(fn, ContinuationKind.START, name)  # so ``Next(fn)`` names it
        return fn

    return decorate


def continuation(name: str, *, version: int) -> Callable[[F], F]:
    """Register ``fn(ctx, snapshot, answers)`` as continuation ``name@version``."""

    def decorate(fn: F) -> F:
        registry.register_continuation(name, version, fn)
        key = registry.continuation_key(name, version)
        references.mark(fn, ContinuationKind.RESUME, key)  # so ``Park(continuation=fn)`` names it
        return fn

    return decorate


@dataclass
class Context:
    """What a body knows of where it runs. ``in_commit`` callbacks run inside the commit transaction."""

    run_id: str
    step_id: str
    attempt: int
    execution_id: str
    step_name: str = ""
    payload: Any = None
    journal_step_id: str = ""  # the step whose tool-call journal this body uses (kept across a preflight)
    in_step_body: bool = True
    commit_hooks: list[Callable[[Any], None]] = field(default_factory=list, repr=False)  # from ``in_commit``
    started_reviews: list[str] = field(default_factory=list, repr=False)  # ids of reviews this execution began
    tool_keys: set[str] = field(default_factory=set, repr=False)  # keys used by this execution

    def tool(
        self,
        name: str,
        *,
        key: str,
        args: Any,
        replay: str,
        run: Callable[[], Any],
        permissions: Sequence[Permission] = (),
    ) -> Any:
        """Run a side effect through the durable journal (see ``tasks.tools.run_tool``)."""
        from tasks.tools import run_tool

        return run_tool(self, name, key=key, args=args, replay=replay, run=run, permissions=permissions)

    def in_commit(self, fn: Callable[[Any], None]) -> None:
        """Run ``fn(session)`` inside the transaction that commits this step: it happens exactly once."""
        self.commit_hooks.append(fn)

    def set_title(self, title: str) -> None:
        """Say what the run is about, in a line a person recognises ("Deploy billing to prod"): its cards on
        the Decisions page and its page lead with it. Written with this step's commit (the latest wins)."""
        if not isinstance(title, str) or not title.strip() or len(title) > 200 or jsonsafe.text_problem(title):
            raise WorkflowError("a run's title is a line of 1 to 200 characters")
        line = " ".join(title.split())

        def titled(session: Any) -> None:
            from models import store

            store.set_title(session, self.run_id, line)  # False once the run ended: nothing to say then

        self.in_commit(titled)

    def start_review(self, kind: str) -> str:
        """Commit a ``running`` review receipt now (its own transaction) and return its id."""
        if not kind:
            raise WorkflowError("a review needs a kind")
        from models import store
        from tasks.holding import own_write

        with own_write(self) as session:
            review_id = store.start_review(
                session, run_id=self.run_id, step_id=self.step_id, kind=kind, execution_id=self.execution_id
            )
        self.started_reviews.append(review_id)
        return review_id

    def review_progress(self, review_id: str, *, finding_count: int, verification_count: int) -> None:
        """Commit the counts of a running review now, so they survive a crash of this execution."""
        from models import store
        from tasks.holding import own_write

        with own_write(self) as session:
            if store.review_progress(
                session, review_id, execution_id=self.execution_id,
                finding_count=finding_count, verification_count=verification_count,
            ) is None:  # fmt: skip
                raise WorkflowError(f"review {review_id} is not running under this execution")

    def record_review(
        self,
        review_id: str,
        verdict: str,
        finding_count: int,
        verification_count: int,
        *,
        failed: bool = False,
    ) -> None:
        """Commit the review's completion now; an empty verdict is refused."""
        if not verdict or not verdict.strip():
            raise WorkflowError(f"review {review_id} needs a verdict")
        from models import store
        from tasks.holding import own_write

        with own_write(self) as session:
            if store.record_review(
                session, review_id, execution_id=self.execution_id, verdict=verdict,
                finding_count=finding_count, verification_count=verification_count, failed=failed,
            ) is None:  # fmt: skip
                raise WorkflowError(f"review {review_id} is not running under this execution")


# What the running half (``tasks.sdk_calls``) and the store define, imported on first use.
_CALLS = ("answer", "cancel", "delegate", "request_digest", "response_digest", "start_run")
_LATER = {"Answer": "models.store", **dict.fromkeys(_CALLS, "tasks.sdk_calls")}


def __getattr__(name: str) -> Any:
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LATER[name]), name)
    globals()[name] = value
    return value
