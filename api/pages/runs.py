"""Run history in the browser: ``/runs`` (the runs the signed-in person may read) and ``/runs/{id}`` (one
run's status, timeline of events, steps, interactions, tool calls and reviews), live by the Decisions
page's event stream. What a person sees is what ``GET /v1/runs/{id}`` would show them: a run needs a live
grant on its target (admins: any), 404 for one that never existed, 403 for one not granted. Nothing sealed
is rendered: interaction values as the API shows them (sensitive fields "***"), no payloads, snapshots or
tool arguments at all.
"""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import Path, Query, Request, Response

from api.input import checked_router
from api.pages import teams, texts
from api.pages.render import login_page, render, run_status
from api.pages.session import CSRF_FIELD, NONCE_COOKIE, csrf_token, session_id, signed_in
from api.pages.timeline import lines
from models import access, cursors, event_log, history, team_views
from models.access import InteractionView
from models.status import RUN_TERMINAL, RunStatus
from models.tables import Principal, Run
from parkway.db import transaction

router = checked_router(prefix="/runs", include_in_schema=False)

LIST_LIMIT = 50
RunId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
STATUSES = [s.value for s in RunStatus]
NO_STORE = {"Cache-Control": "no-store"}


def _person(request: Request) -> tuple[Principal | None, Response | None]:
    """The signed-in person, or the sign-in page leading back here."""
    principal = signed_in(request)
    if principal is None:
        return None, login_page(request, next_path=request.url.path)
    if request.cookies.get(NONCE_COOKIE) is None:
        return None, login_page(request, message=texts.SESSION_ENDED, next_path=request.url.path)
    return principal, None


def _page(request: Request, principal: Principal, name: str, status_code: int = 200, **context: object) -> Response:
    csrf = csrf_token(request.cookies.get(NONCE_COOKIE, ""), session_id(request))
    full = {"principal": principal, "csrf": csrf, "csrf_field": CSRF_FIELD, "terminal": sorted(RUN_TERMINAL)}
    return render(request, name, {**full, **context}, status_code=status_code)


def _readable(principal: Principal, run_id: str) -> tuple[Run | None, int]:
    """The run if the caller may read it, else ``None`` with 404 (never existed) or 403 (not granted)."""
    with transaction() as session:
        run = access.get_run(session, run_id)
        if run is None:
            return None, 404
        return (run, 200) if access.can_see_run(session, principal, run_id) else (None, 403)


def _problem(request: Request, principal: Principal, run_id: str, code: int) -> Response:
    text = texts.RUN_NOT_FOUND if code == 404 else texts.RUN_FORBIDDEN
    return _page(request, principal, "problem.html", code, text=text.format(id=run_id, name=principal.name))


@router.get("")
def list_runs(
    request: Request,
    status: Annotated[str, Query(max_length=16)] = "",
    workflow: Annotated[str, Query(max_length=200)] = "",
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> Response:
    """The runs the person may read, newest first, filtered by status and workflow."""
    principal, refused = _person(request)
    if principal is None:
        assert refused is not None
        return refused
    status = status if status in STATUSES else ""
    workflow = workflow.strip()
    with transaction() as session:
        after = event_log.stream_cursor(session)
        listed = functools.partial(history.list_runs, session, principal, status=status, workflow=workflow)
        try:
            page = listed(cursor=cursor, limit=LIST_LIMIT)
        except cursors.InvalidCursor:  # not a cursor this page handed out: the first page
            page = listed(cursor=None, limit=LIST_LIMIT)
    return _page(
        request,
        principal,
        "runs.html",
        runs=page.items,
        next_cursor=page.next,
        status=status,
        workflow=workflow,
        statuses=STATUSES,
        workflows=sorted({line.run.workflow for line in page.items} | ({workflow} if workflow else set())),
        run_status=run_status,
        stream_url=f"/decisions/stream?after={after}",
    )


@router.get("/{run_id}")
def show_run(request: Request, run_id: RunId) -> Response:
    """One run's history: summary, timeline, steps, interactions, tool calls, reviews."""
    principal, refused = _person(request)
    if principal is None:
        assert refused is not None
        return refused
    run, code = _readable(principal, run_id)
    if run is None:
        return _problem(request, principal, run_id, code)
    story, team = _story(principal, run.id)
    return _page(
        request,
        principal,
        "run.html",
        h=story,
        teams=team,
        status=run_status(story.run),
        lines=lines(story.events),
        stream_url=f"/decisions/stream?after={story.cursor}",
    )


def _story(principal: Principal, run_id: str) -> tuple[history.History, dict[str, teams.Team]]:
    """The run's history, and the team of each of its interactions the caller may read (its responses,
    level, decision and delegations: two reads for the whole run)."""
    with transaction() as session:
        story = history.run_history(session, principal, run_id)
        views = [InteractionView(a.interaction, a.answered_by) for a in story.interactions]
        team_views.fill(session, views)
    return story, {v.interaction.id: teams.Team(v) for v in views}


def _fragment_of(request: Request, run_id: str) -> tuple[Principal, Run] | Response:
    """Who asks for a live page's fragment and the run it is of, or the bare status the page would get."""
    principal = signed_in(request)
    if principal is None:
        return Response(status_code=401, headers=NO_STORE)
    run, code = _readable(principal, run_id)
    return (principal, run) if run is not None else Response(status_code=code, headers=NO_STORE)


@router.get("/{run_id}/parts")
def parts(request: Request, run_id: RunId) -> Response:
    """The run's summary and tables, for the live page to swap in (401, 403 or 404 as the page would)."""
    found = _fragment_of(request, run_id)
    if isinstance(found, Response):
        return found
    story, team = _story(found[0], found[1].id)
    return render(request, "_run_parts.html", {"h": story, "teams": team, "status": run_status(story.run)})


@router.get("/{run_id}/timeline")
def timeline(request: Request, run_id: RunId, after: Annotated[int, Query(ge=0, le=2**62)] = 0) -> Response:
    """The run's final events after ``after`` as timeline rows, for the live page to append."""
    found = _fragment_of(request, run_id)
    if isinstance(found, Response):
        return found
    with transaction() as session:
        events = history.events_after(session, run_id, after=after)
    return render(request, "_timeline.html", {"lines": lines(events)})
