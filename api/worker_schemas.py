"""The fleet's resources: live workers and the versions work still needs (``GET /v1/workers``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class WorkerOut(BaseModel):
    """A live worker, read from ``models.store.workers.WorkerView`` (``model_validate``)."""

    model_config = ConfigDict(from_attributes=True)

    node: str = Field(
        description="the worker's Celery node name (`name@host`), a remote worker's name, or "
        "`push:<id>` for a push handler"
    )
    kind: Literal["celery", "remote", "push"] = Field(
        description="a Celery worker, a remote worker (the HTTP worker protocol), or a push handler (live while it "
        "accepted work within `PARKWAY_PUSH_LIVE_S`)"
    )
    pid: int
    steps: list[str] = Field(description="the step names it runs")
    continuations: list[str] = Field(description="the continuation versions it runs, `name@version`")
    started_at: datetime = Field(description="since when it serves (a push handler: since it was registered)")
    heartbeat_at: datetime = Field(
        description="its last heartbeat, on the database's clock (a push handler: its last accepted push)"
    )
    remote: bool = Field(description="a remote worker (the HTTP worker protocol): its lease calls are its heartbeats")


class VersionOut(BaseModel):
    """A version work still needs, read from ``models.fleet.VersionLoad`` (``model_validate``)."""

    model_config = ConfigDict(from_attributes=True)

    version: str = Field(description="a continuation version, `name@version`")
    parked: int = Field(description="parked steps waiting on it")
    due: int = Field(description="its continuations made due (answered or expired) and not yet run")
    served: bool = Field(description="a live worker runs it now")
    grace_left_s: float | None = Field(
        None,
        description="no live worker runs it: the seconds left of its grace (`PARKWAY_VERSION_GRACE_S`, counted only "
        "while its fleet is up) before the sweep interrupts its waits, 0 once it ran out; null while a live worker "
        "runs it, or while its fleet is down (the grace does not count)",
    )


class WorkerPage(BaseModel):
    items: list[WorkerOut]
    next: str | None = Field(None, description="always null: every live worker is on the one page")
    versions: list[VersionOut] = Field(
        description="every continuation version that parked steps or due continuations still need, served or "
        "not: retire a version (stop every worker that runs it) only once it is not listed"
    )
