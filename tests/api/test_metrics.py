"""``GET /metrics`` reads the broker and the database at scrape time: queue length, unacked, oldest ready
continuation, sweep totals. Runs on Redis and on the filesystem broker (a ``broker`` module)."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from beat.report import CATEGORIES
from beat.sweep import run_sweep
from models import store
from models.tables import Review
from parkway.db import transaction
from tasks.celery_app import CONTINUATIONS_QUEUE, STEPS_QUEUE, SWEEP, SWEEP_QUEUE
from tasks.celery_app import app as celery_app
from tests.api.conftest import AGENT, Actors, drive
from tests.integration.helpers import advertise
from tests.support import Stack, pass_time, start, wait_for, wait_parked, wait_status

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
QUEUES = (STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE)


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


UNACKED = ("parkway_queue_unacked", "parkway_broker_unacked")


def unacked_exported(samples: Samples) -> list[str]:
    """The unacknowledged-delivery metrics in a scrape (none on a broker that keeps no record of them)."""
    return [name for name, _ in samples if name in UNACKED]


def lengths(client: TestClient) -> dict[str, float | None]:
    samples = scrape(client)
    return {queue: value(samples, "parkway_queue_length", queue=queue) for queue in QUEUES}


def test_metrics__queue_length_oldest_ready_and_sweep_totals_with_no_worker(client: TestClient, stack: Stack) -> None:
    # Given an empty broker and no worker
    stack.flush_broker()
    before = scrape(client)
    assert value(before, "parkway_broker_up") == 1
    assert {queue: value(before, "parkway_queue_length", queue=queue) for queue in QUEUES} == dict.fromkeys(QUEUES, 0)
    # When a run starts (its step is published) and two sweeps are sent, nobody consuming
    run_id = start("t.ask_one")
    for _ in range(2):
        celery_app.send_task(SWEEP, queue=SWEEP_QUEUE)
    # Then each queue's length shows its messages
    assert lengths(client) == {STEPS_QUEUE: 1, CONTINUATIONS_QUEUE: 0, SWEEP_QUEUE: 2}
    # And the ready continuation is counted and ages
    wait_for(
        lambda: (value(scrape(client), "parkway_continuation_oldest_ready_age_seconds") or 0) > 0.2,
        timeout=10,
        what="the oldest ready continuation to age",
    )
    samples = scrape(client)
    assert (value(samples, "parkway_continuations", status="ready") or 0) >= 1
    assert (value(samples, "parkway_continuation_ready_publish_age_seconds") or 0) > 0
    assert value(samples, "parkway_runs_projection_pending") == 0
    if stack.broker == "redis":  # nothing delivered, so nothing unacknowledged
        assert value(samples, "parkway_broker_unacked") == 0
        assert {q: value(samples, "parkway_queue_unacked", queue=q) for q in QUEUES} == dict.fromkeys(QUEUES, 0)
    else:  # the filesystem broker keeps no record of deliveries: not exported rather than a made-up 0
        assert not unacked_exported(samples)

    # When a sweep pass finds the ready continuation stale and its message lost, it publishes it again and
    # records its totals (while its message waits in the queue, it would leave it: docs/operations.md)
    republished_before = value(samples, "parkway_sweep_rows_total", category="republished") or 0
    passes_before = value(samples, "parkway_sweep_passes_total") or 0
    pass_time(30)
    assert run_sweep().counts["republished"] == 0
    stack.flush_broker()
    report = run_sweep()
    assert report.counts["republished"] >= 1
    after = scrape(client)
    for category in CATEGORIES:
        assert value(after, "parkway_sweep_last_rows", category=category) == report.counts[category]
    assert (
        value(after, "parkway_sweep_rows_total", category="republished")
        == republished_before + (report.counts["republished"])
    )
    assert abs((value(after, "parkway_sweep_last_timestamp_seconds") or 0) - time.time()) < 30
    assert (value(after, "parkway_sweep_passes_total") or 0) >= passes_before + 2  # idle passes are counted too
    assert (value(after, "parkway_sweep_last_duration_seconds") or -1) >= 0
    assert value(after, "parkway_queue_length", queue=STEPS_QUEUE) == 1  # the lost message, sent again
    # The publish age restarted with the re-publish; the continuation's own age did not
    assert (value(after, "parkway_continuation_ready_publish_age_seconds") or 0) < (
        value(after, "parkway_continuation_oldest_ready_age_seconds") or 0
    )

    # When a worker starts, it drains every queue; the run parks; nothing is ready any more
    stack.start_worker()
    wait_for(lambda: lengths(client) == dict.fromkeys(QUEUES, 0), timeout=40, what="queues drained")
    wait_parked(run_id)
    wait_for(
        lambda: value(scrape(client), "parkway_continuation_oldest_ready_age_seconds") == 0,
        timeout=20,
        what="no ready continuation left",
    )


def test_metrics__a_message_held_by_a_busy_worker__unacked_on_redis_and_never_a_false_zero(
    client: TestClient, stack: Stack, tmp_path: Path
) -> None:
    if not any(worker.alive() for worker in stack.workers):
        stack.start_worker()
    # Given a step whose body blocks until a flag file exists (acks_late: its message stays unacknowledged)
    flag = tmp_path / "go"
    run_id = start("t.review", {"wait_for": str(flag)})

    def held() -> bool:
        samples = scrape(client)
        return (
            value(samples, "parkway_queue_unacked", queue=STEPS_QUEUE) == 1
            and value(samples, "parkway_broker_unacked") == 1
        )

    if stack.broker == "redis":
        # Then the message shows as unacknowledged on its queue while the body runs
        wait_for(held, timeout=30, what="the step's message unacknowledged")
    else:
        # Then, while the body runs (its review receipt is committed at once), the filesystem broker, which
        # keeps no record of deliveries, exports no unacknowledged count at all: never a 0 that is false now
        wait_for(lambda: review_statuses(run_id) == ["running"], timeout=30, what="the step's body running")
        assert unacked_exported(scrape(client)) == []
    # And the held message is not counted as waiting on its queue
    assert value(scrape(client), "parkway_queue_length", queue=STEPS_QUEUE) == 0
    # And once the body finishes and the task is acknowledged, it is gone
    flag.touch()
    wait_status(run_id, "completed", sweep=False)
    if stack.broker == "redis":
        wait_for(lambda: value(scrape(client), "parkway_broker_unacked") == 0, timeout=20, what="the acknowledgement")
    else:
        assert unacked_exported(scrape(client)) == []


def review_statuses(run_id: str) -> list[str]:
    with transaction() as session:
        return list(session.scalars(select(Review.status).where(Review.run_id == run_id)))


def test_metrics__openapi_and_docs_are_timed_under_their_own_paths(client: TestClient) -> None:
    # Given the schema and both documentation pages fetched
    before = scrape(client)
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert client.get(path).status_code == 200
    after = scrape(client)

    # Then each is counted under its path, not as an unmatched route
    def count(samples: Samples, route: str) -> float:
        key = "parkway_http_request_duration_seconds_count"
        return value(samples, key, method="GET", route=route, status="200") or 0

    for path in ("/openapi.json", "/docs", "/redoc"):
        assert count(after, path) - count(before, path) == 1, path
    assert count(after, "unmatched") == count(before, "unmatched")


def test_metrics__an_agents_answer_refused_for_its_kind_is_counted_as_forbidden(
    client: TestClient, actors: Actors
) -> None:
    # Given the answers counted so far
    before = value(scrape(client), "parkway_answers_total", outcome="forbidden") or 0
    # When an agent tries to answer (agents never answer)
    refused = client.post(
        "/v1/interactions/someone/answer", json={"response_id": "r-agent", "value": 1}, headers=actors.auth(AGENT)
    )
    # Then it gets its 403, and the answer is counted with the outcome a 403 has
    assert refused.status_code == 403, refused.text
    assert (value(scrape(client), "parkway_answers_total", outcome="forbidden") or 0) == before + 1


def test_metrics__waits_on_a_version_no_live_worker_runs_are_counted_until_one_advertises_it(
    client: TestClient,
) -> None:
    # Given a run parked on a version no worker advertises (a key of its own: the module's workers run t.*@1)
    unserved = "t.metrics_done@1"
    before = value(scrape(client), "parkway_waits_unserved") or 0
    run_id = start("t.ask_one", {"continuation": unserved})
    drive(run_id)
    wait_parked(run_id)

    # Then the wait is counted, in total and under its version
    samples = scrape(client)
    assert value(samples, "parkway_waits_unserved_by_version", version=unserved) == 1
    assert value(samples, "parkway_waits_unserved") == before + 1

    # When a live worker advertises that version, the wait is no longer counted
    worker = advertise("metrics@host", continuations=(unserved,))
    try:
        samples = scrape(client)
        assert value(samples, "parkway_waits_unserved_by_version", version=unserved) is None
        assert value(samples, "parkway_waits_unserved") == before
    finally:
        with transaction() as session:
            store.withdraw(session, worker)
