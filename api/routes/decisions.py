"""The decision record (admins and auditors): who decided what, streamed; the seal that proves it unchanged,
verified against the tables now; the public key an auditor verifies with (docs/operations.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Query
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator

from api.deps import AuditDep, TextFilter, in_thread
from api.errors import documented
from api.input import checked_router
from models import access, decision_export, seal_reads
from models.decisions import Span
from parkway.crypto import seal_public_key

router = checked_router(prefix="/v1/decisions", tags=["decisions"])

# An ISO 8601 string only: pydantic alone would read a number such as -34981 as Unix time.
Instant = BeforeValidator(Span.instant)
Since = Annotated[datetime | None, Instant, Query(description="decided at or after (ISO 8601; UTC unless it says)")]
Until = Annotated[datetime | None, Instant, Query(description="decided before (ISO 8601; UTC unless it says)")]
NDJSON = "application/x-ndjson"


@router.get(
    "",
    operation_id="export_decisions",
    summary="One line per decided wait the caller may read (NDJSON, then the seal's checkpoints that span them; "
    "or CSV)",
    responses={**documented(401, 403, 422), 200: {"content": {NDJSON: {}, "text/csv": {}}}},
    response_class=StreamingResponse,
)
def export_decisions(
    principal: AuditDep,
    since: Since = None,
    until: Until = None,
    target: TextFilter = None,
    format: Annotated[Literal["ndjson", "csv"], Query(description="`ndjson` (default) or `csv`")] = "ndjson",
) -> StreamingResponse:
    span = Span(since, until, target)
    targets = access.decision_targets(principal)
    if format == "csv":
        return StreamingResponse(decision_export.csv_rows(targets, span), media_type="text/csv")
    return StreamingResponse(decision_export.ndjson(targets, span), media_type=NDJSON)


@router.get(
    "/verify",
    operation_id="verify_decisions",
    summary="Whether any event, response or decision sealed in the range changed since, and the first bad seq",
    responses=documented(401, 403, 422),
)
async def verify_decisions(principal: AuditDep, since: Since = None, until: Until = None) -> dict[str, Any]:
    verdict = await in_thread(lambda: seal_reads.verify_live(since=since, until=until, public_key=seal_public_key()))
    return verdict.as_dict()


@router.get(
    "/key",
    operation_id="seal_key",
    summary="The Ed25519 public key the seal's checkpoints are signed with",
    responses=documented(401, 403, 422),
)
def seal_key(principal: AuditDep) -> dict[str, str]:
    return {"algorithm": "ed25519", "public_key": seal_public_key()}
