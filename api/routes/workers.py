"""Workers (admins): the live fleet, what each worker runs and when it last said so, and the continuation
versions work still waits on (issue 30)."""

from __future__ import annotations

from api.deps import AdminDep, SessionDep
from api.errors import documented
from api.input import checked_router
from api.worker_schemas import VersionOut, WorkerOut, WorkerPage
from models import fleet, store

router = checked_router(prefix="/v1/workers", tags=["workers"])


@router.get(
    "",
    response_model=WorkerPage,
    operation_id="list_workers",
    summary="The live workers by node (the step names and `name@version` keys each runs, its last heartbeat), "
    "and the versions work still waits on",
    responses=documented(401, 403, 422),
)
def list_workers(admin: AdminDep, session: SessionDep) -> WorkerPage:
    """A worker is live while its heartbeat is recent (three heartbeats); one that stopped is not listed."""
    workers = [WorkerOut.model_validate(w) for w in store.live_workers(session)]
    loads = [VersionOut.model_validate(v) for v in fleet.versions(session)]
    return WorkerPage(items=workers, next=None, versions=loads)
