"""Liveness, readiness (schema current and broker reachable) and Prometheus metrics."""

from __future__ import annotations

from fastapi import Response

from api import errors
from api.admin_schemas import Health, Readiness
from api.errors import ApiError, documented
from api.input import checked_router
from api.metrics import REGISTRY
from parkway.db import failure_line, get_engine
from parkway.migrate import head_revision, schema_problem

router = checked_router(tags=["health"])


@router.get("/healthz", response_model=Health, operation_id="get_liveness", summary="Liveness: the process answers")
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    operation_id="get_readiness",
    summary="Readiness: the database schema is the one this code needs and the broker is reachable",
    responses=documented(503),
)
def readyz() -> Readiness:
    problem = readiness_problem()
    if problem is not None:
        raise ApiError(503, errors.NOT_READY.format(reason=problem))
    return Readiness(status="ready", schema_revision=head_revision())


def readiness_problem() -> str | None:
    """Why this process should not get traffic now (the database's problem and the broker's, each that
    has one), or ``None``."""
    problems = [p for p in (database_problem(), broker_problem()) if p is not None]
    return "; also ".join(problems) or None


def database_problem() -> str | None:
    try:
        return schema_problem(get_engine())
    except Exception as exc:  # the driver's first line says why (refused, closed, no such database)
        return f"the database is unreachable ({failure_line(exc)})"


def broker_problem() -> str | None:
    from tasks.celery_app import app as celery_app

    try:
        with celery_app.connection_for_write() as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0.2, interval_max=0.5, timeout=3
            )
    except Exception as exc:
        return f"the broker is unreachable ({type(exc).__name__}: {exc})"
    return None


@router.get(
    "/metrics",
    response_class=Response,
    operation_id="get_metrics",
    summary="Prometheus metrics",
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def metrics() -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
