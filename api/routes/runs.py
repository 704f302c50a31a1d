"""Runs: start one (agents), list and read those the caller may read (a live grant on the target, or admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Path

from api import errors
from api.deps import AgentDep, CursorParam, LimitParam, PrincipalDep, SessionDep, TextFilter
from api.errors import ApiError, documented
from api.input import checked_router
from api.schemas import ID, TEXT, RunCreate, RunLineOut, RunOut, RunPage, RunStatusLiteral
from models import access, history
from parkway import tracing
from parkway.db import transaction
from parkway.errors import NotRegistered
from tasks import sdk

router = checked_router(prefix="/v1/runs", tags=["runs"])

RunId = Annotated[str, Path(pattern=ID, description="the run's id")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=200,
        pattern=TEXT,
        description="a retry with the same key and body returns the same run; another body gets 409",
    ),
]


@router.post(
    "",
    status_code=201,
    response_model=RunOut,
    operation_id="start_run",
    summary="Start a run (agents granted on the target)",
    responses=documented(401, 403, 409, 413, 422, models=errors.RUN_OUTCOMES),
)
def start_run(body: RunCreate, agent: AgentDep, idempotency_key: IdempotencyKey = None) -> RunOut:
    """The owner is the authenticated agent; a body naming an `owner` is refused (422). With `park`, the first
    step is parked at once (one transaction) on a continuation a live worker serves, else 422 naming it; its
    waits address only targets the agent holds a live grant on and name only live people, else 403 naming
    what it may not address (nothing stored)."""
    with tracing.span("parkway.run.start", workflow=body.workflow, principal=agent.name, target=body.target):
        try:
            run_id = sdk.start_run(
                body.workflow,
                body.payload,
                principal=agent.name,
                target=body.target,
                idempotency_key=idempotency_key,
                park=body.park,
            )
        except NotRegistered as exc:
            raise ApiError(422, str(exc), code="unknown_workflow") from None
        tracing.annotate(run_id=run_id)
    with transaction() as session:
        run = access.get_run(session, run_id)
        assert run is not None
        return RunOut.of(access.run_view(session, run))


@router.get(
    "",
    response_model=RunPage,
    operation_id="list_runs",
    summary="The runs the caller may read, newest first (granted targets; all for admins)",
    responses=documented(401, 422),
)
def list_runs(
    principal: PrincipalDep,
    session: SessionDep,
    status: RunStatusLiteral | None = None,
    workflow: TextFilter = None,
    target: TextFilter = None,
    cursor: CursorParam = None,
    limit: LimitParam = 50,
) -> RunPage:
    page = history.list_runs(
        session, principal, status=status, workflow=workflow, target=target, cursor=cursor, limit=limit
    )
    return RunPage(items=[RunLineOut.of(line) for line in page.items], next=page.next)


@router.get(
    "/{run_id}",
    response_model=RunOut,
    operation_id="get_run",
    summary="A run's canonical status, result or error, steps and open interactions",
    responses=documented(401, 403, 404, 422),
)
def read_run(run_id: RunId, principal: PrincipalDep, session: SessionDep) -> RunOut:
    run = access.get_run(session, run_id)
    if run is None:
        raise ApiError(404, errors.RUN_NOT_FOUND.format(id=run_id))
    if not access.can_see_run(session, principal, run.id):
        raise ApiError(403, errors.RUN_FORBIDDEN.format(name=principal.name, id=run.id))
    return RunOut.of(access.run_view(session, run))
