"""Workers (admins): the live fleet, each worker's kind, what it runs, since when and when it last said so, and
the continuation versions work still waits on, with the grace left of each no live worker runs (issues 30, 41)."""

from __future__ import annotations

from api.deps import AdminDep, SessionDep
from api.errors import documented
from api.input import checked_router
from api.worker_schemas import VersionOut, WorkerOut, WorkerPage
from models import fleet, store
from parkway.settings import get_settings

router = checked_router(prefix="/v1/workers", tags=["workers"])


@router.get(
    "",
    response_model=WorkerPage,
    operation_id="list_workers",
    summary="The live workers by node (each one's kind, the step names and `name@version` keys it runs, since "
    "when, its last heartbeat), and the versions work still waits on (of one no live worker runs, its grace left)",
    responses=documented(401, 403, 422),
)
def list_workers(admin: AdminDep, session: SessionDep) -> WorkerPage:
    """A worker is live while its heartbeat is recent (three heartbeats); one that stopped is not listed."""
    workers = [WorkerOut.model_validate(w) for w in store.live_workers(session)]
    loads = [VersionOut.model_validate(v) for v in fleet.versions(session, grace_s=get_settings().version_grace_s)]
    return WorkerPage(items=workers, next=None, versions=loads)
