"""Each task message says, for Flower, the run, step and ``name@version`` it serves (``argsrepr`` and
``kwargsrepr``), never a payload or an answer, on every publish path: a start, an answer, the sweep's
republish (issue 35 §5). Read back from the real broker, no worker consuming."""

from __future__ import annotations

from ast import literal_eval
from typing import Any

from sqlalchemy import text

from beat.sweep import run_sweep
from parkway.db import transaction
from tasks.celery_app import CONTINUATIONS_QUEUE, STEPS_QUEUE, app
from tasks.sdk import answer, start_run
from tests.support import AGENT, HUMAN, TARGET, Stack, interactions, new_response_id


def _taken(queue: str, continuation_id: str) -> dict[str, Any]:
    """The headers of the message in ``queue`` for the continuation (taken off the queue)."""
    with app.connection_for_read() as conn, conn.SimpleQueue(app.amqp.queues[queue]) as messages:
        for _ in range(50):
            message = messages.get(timeout=10)
            message.ack()
            if message.headers.get("argsrepr") and continuation_id in message.headers["argsrepr"]:
                return dict(message.headers)
    raise AssertionError(f"no message for continuation {continuation_id} in {queue}")


def _continuation(run_id: str, kind: str) -> tuple[str, str, str]:
    with transaction() as session:
        sql = "SELECT id, step_id, name FROM continuations WHERE run_id = :r AND kind = :k"
        row = session.execute(text(sql), {"r": run_id, "k": kind}).one()
    return row.id, row.step_id, row.name


def test_task_messages__name_the_run_step_and_version_they_serve_never_the_payload_or_answer(stack: Stack) -> None:
    # Given a run started with a payload the message must not carry
    run_id = start_run("t.ask_one", {"secret_word": "swordfish"}, principal=AGENT, target=TARGET)
    started, step_id, _ = _continuation(run_id, "start")

    # When its start is published, then read back: the ids, the step's name, nothing of the payload
    headers = _taken(STEPS_QUEUE, started)
    assert headers["argsrepr"] == repr([started])
    assert literal_eval(headers["kwargsrepr"]) == {"run_id": run_id, "step_id": step_id, "serves": "t.ask_one"}
    assert "swordfish" not in repr(headers)

    # And an answer's resume names its continuation as name@version, never the answer
    from tasks.worker import execute

    assert execute(started) == "committed"
    answer(interactions(run_id)["go"].id, "hunter2", response_id=new_response_id(), principal=HUMAN)
    resumed, parked_step, version = _continuation(run_id, "resume")
    headers = _taken(CONTINUATIONS_QUEUE, resumed)
    assert literal_eval(headers["kwargsrepr"]) == {"run_id": run_id, "step_id": parked_step, "serves": "t.one_done@1"}
    assert version == "t.one_done@1" and "hunter2" not in repr(headers)

    # And the sweep's republish of that lost message says the same
    with transaction() as session:
        session.execute(text("UPDATE continuations SET enqueued_at = now() - interval '1 hour' WHERE id = :c"),
                        {"c": resumed})  # fmt: skip
    assert run_sweep().counts["republished"] >= 1
    assert literal_eval(_taken(CONTINUATIONS_QUEUE, resumed)["kwargsrepr"])["serves"] == "t.one_done@1"
