"""The fleet's resources: live workers and the versions work still needs (``GET /v1/workers``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class WorkerOut(BaseModel):
    """A live worker, read from ``models.store.workers.WorkerView`` (``model_validate``)."""

    model_config = ConfigDict(from_attributes=True)

    node: str = Field(description="the worker's Celery node name (`name@host`)")
    pid: int
    steps: list[str] = Field(description="the step names it runs")
    continuations: list[str] = Field(description="the continuation versions it runs, `name@version`")
    started_at: datetime
    heartbeat_at: datetime = Field(description="its last heartbeat, on the database's clock")
    remote: bool = Field(description="a remote worker (the HTTP worker protocol): its lease calls are its heartbeats")


class VersionOut(BaseModel):
    """A version work still needs, read from ``models.fleet.VersionLoad`` (``model_validate``)."""

    model_config = ConfigDict(from_attributes=True)

    version: str = Field(description="a continuation version, `name@version`")
    parked: int = Field(description="parked steps waiting on it")
    due: int = Field(description="its continuations made due (answered or expired) and not yet run")
    served: bool = Field(description="a live worker runs it now")


class WorkerPage(BaseModel):
    items: list[WorkerOut]
    next: str | None = Field(None, description="always null: every live worker is on the one page")
    versions: list[VersionOut] = Field(
        description="every continuation version that parked steps or due continuations still need, served or "
        "not: retire a version (stop every worker that runs it) only once it is not listed"
    )
