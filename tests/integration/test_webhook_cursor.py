"""The webhook cursor against real PostgreSQL: one claim wins, a lost claim moves nothing, the cursor never
passes an event still to commit (the event log's own horizon), and the sweep publishes each subscription
that is behind once."""

from __future__ import annotations

import threading

from sqlalchemy import text

from beat.sweep import run_sweep
from models import store, webhooks
from models.webhook_tables import Webhook
from parkway.crypto import seal
from parkway.db import session_factory, transaction
from tests.integration.helpers import Sent
from tests.integration.test_event_log import _new_run, _open_writer, _seqs
from tests.support import TARGET


def subscribe(events: list[str] | None = None) -> str:
    with transaction() as session:
        hook = store.create_webhook(session, url="http://127.0.0.1:9/", events=events or ["*"], targets=[TARGET],
                                    description=None, secret_sealed=seal("whsec_x"))  # fmt: skip
        return hook.id


def claim(webhook_id: str, token: str) -> bool:
    with transaction() as session:
        return store.claim_webhook(session, webhook_id, token, 30) is not None


def test_claim__two_at_once_one_wins_and_the_loser_moves_nothing(actors_db: str) -> None:
    hook_id = subscribe()
    barrier, won = threading.Barrier(2), []

    def race(token: str) -> None:
        barrier.wait()
        if claim(hook_id, token):
            won.append(token)

    threads = [threading.Thread(target=race, args=(t,)) for t in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    loser = "b" if won == ["a"] else "a"
    with transaction() as session:
        cursor = session.get(Webhook, hook_id).cursor  # type: ignore[union-attr]
        assert not store.advance(session, hook_id, loser, cursor=cursor, to=cursor + 1, lease_s=30)
        assert not store.release(session, hook_id, loser)
        assert store.advance(session, hook_id, won[0], cursor=cursor, to=cursor + 1, lease_s=30)
        assert not store.advance(session, hook_id, won[0], cursor=cursor, to=cursor + 2, lease_s=30)  # moved already


def test_due_events__never_past_an_event_still_to_commit(actors_db: str) -> None:
    hook_id = subscribe()
    with transaction() as session:
        run_id = _new_run(session)
    writer, seq_a = _open_writer(run_id, "test.a")  # a lower seq, committing last
    try:
        with transaction() as session:
            store.append_event(session, run_id, "test.b")
        seq_b = _seqs(run_id)[-1]
        assert seq_a < seq_b
        with transaction() as session:
            events, upto = webhooks.due_events(session, session.get(Webhook, hook_id), limit=50)  # type: ignore[arg-type]
        assert seq_b not in [e.seq for e in events] and upto < seq_a
    finally:
        writer.commit()
        writer.close()
    with transaction() as session:
        events, upto = webhooks.due_events(session, session.get(Webhook, hook_id), limit=50)  # type: ignore[arg-type]
    assert [e.seq for e in events][-2:] == [seq_a, seq_b] and upto == seq_b


def test_sweep__publishes_a_subscription_behind_once_until_it_is_claimed(actors_db: str, sent: Sent) -> None:
    behind, caught_up = subscribe(), subscribe()
    with transaction() as session:
        _new_run(session)  # its events put both behind
    with session_factory()() as session, session.begin():
        session.execute(text("UPDATE webhooks SET cursor = (SELECT max(seq) FROM events) WHERE id = :id"),
                        {"id": caught_up})  # fmt: skip

    assert run_sweep().counts["webhooks"] == 1
    assert [(name, arg) for name, arg, _ in sent.calls if name == "parkway.deliver_webhook"] == [
        ("parkway.deliver_webhook", behind)
    ]
    # A second pass does not send it again while its message may still be queued
    assert run_sweep().counts["webhooks"] == 0
    # A claimed one is not sent either, even once the republish age has passed
    assert claim(behind, "t")
    with transaction() as session:
        session.execute(text("UPDATE webhooks SET published_at = now() - interval '1 hour'"))
    assert run_sweep().counts["webhooks"] == 0


def test_sweep__prunes_the_delivery_log_past_its_age_a_batch_at_a_time(actors_db: str) -> None:
    hook_id = subscribe()
    with transaction() as session:
        lines = [
            store.DeliveryLine(seq=days, attempt=1, status_code=204, latency_ms=1) for days in (40, 39, 38, 37, 36, 1)
        ]
        store.record_deliveries(session, hook_id, lines)
        session.execute(text("UPDATE webhook_deliveries SET at = now() - make_interval(days => seq::int)"))

    assert run_sweep(batch=3).counts["webhook_log"] == 3  # PARKWAY_WEBHOOK_LOG_DAYS: 30 by default
    assert run_sweep(batch=3).counts["webhook_log"] == 2
    assert run_sweep(batch=3).counts["webhook_log"] == 0
    with transaction() as session:
        assert [d.seq for d in webhooks.list_deliveries(session, hook_id, cursor=None, limit=10)[0]] == [1]


def test_delete__an_attempt_in_flight_then_moves_and_logs_nothing(actors_db: str) -> None:
    from models.status import WebhookStatus

    hook_id = subscribe()
    assert claim(hook_id, "t")
    with transaction() as session:
        assert store.delete_webhook(session, hook_id)
    with transaction() as session:
        assert not store.advance(session, hook_id, "t", cursor=0, to=1, lease_s=30)
        assert not store.record_failure(session, hook_id, "t", seq=1, retry_in_s=None, status=WebhookStatus.FAILING,
                                        reason="x", public_reason="x")  # fmt: skip
        assert webhooks.get_webhook(session, hook_id) is None
