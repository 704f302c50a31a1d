"""The recovery sweep: bounded, indexed, safe to run beside itself; it only re-enqueues.

``run_sweep(batch=…)`` is called at worker start (``worker_ready``), on the beat cadence (task
``parkway.sweep``) and by ``parkway sweep --once``. Each category touches at most ``batch`` rows; one bad
row is logged and skipped without stopping the pass.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Any

from beat import schedule
from beat.report import SweepReport
from models import fail_closed, projections, store
from models.store import Due
from models.store.seals import seal_next
from parkway import tracing
from parkway.crash import crash_point
from parkway.db import database_unavailable, failure_line, single_statement, transaction
from parkway.settings import get_settings
from tasks.celery_app import CONTINUATIONS_QUEUE, STEPS_QUEUE, SWEEP, SWEEP_QUEUE, app
from tasks.projection import catch_up, project, project_quietly
from tasks.publish import publish, publish_webhooks

log = logging.getLogger("parkway.sweep")


def run_sweep(batch: int | None = None) -> SweepReport:
    """One pass over every category; returns the report (also logged as one summary line, at DEBUG when the
    pass did nothing). Every age and expiry is judged by the database's clock (``models.clock``), never this
    host's."""
    settings = get_settings()
    batch = batch or settings.sweep_batch
    report = SweepReport(batch=batch)
    started = time.monotonic()
    to_publish: list[Due] = []
    to_publish += _expired_leases(report, batch=batch, max_attempts=settings.max_attempts)
    _failed_closed(report, batch=batch)
    to_publish += _expire_interactions(report, batch=batch)
    to_publish += _stale_ready(report, batch=batch, older_than_s=settings.reenqueue_after_s)
    _stranded_reviews(report, batch=batch)
    _team_timers(report, batch=batch)
    with _traced(report, to_publish):
        report.published = _publish_batch(to_publish)
    _projections(report, batch=batch)
    _webhooks(report, batch=batch, republish_after_s=settings.reenqueue_after_s)
    with transaction() as session:
        report.counts["webhook_log"] += store.prune_deliveries(
            session, older_than_s=settings.webhook_log_days * 86400, batch=batch
        )
    _seal(report, batch=batch)
    report.duration_s = time.monotonic() - started
    with transaction() as session:  # the totals count the pass too (store.PASSES): it is seen there, not in a log
        store.record_sweep(session, report.counts, duration_s=report.duration_s)
    # A pass that found nothing to do is the idle stack's heartbeat: no line (DEBUG only), one sentence otherwise.
    sentence = report.sentence()
    log.log(logging.DEBUG if sentence is None else logging.INFO, sentence or report.line(),
            extra={"action": "sweep", "counts": report.counts})  # fmt: skip
    return report


def _traced(report: SweepReport, to_publish: list[Due]) -> Any:
    """A pass that re-drives or interrupted something is a span of its own (a new trace; an idle pass none),
    its counts as attributes; each re-driven execution links to the attempt before it (its claim reads it)."""
    if not (to_publish or any(report.counts.values())):
        return nullcontext()
    counts = " ".join(f"{name}={n}" for name, n in report.counts.items() if n)
    return tracing.span("parkway.sweep", root=True, redriven=",".join(d.id for d in to_publish) or None, swept=counts)


def _publish_batch(items: list[Due]) -> int:
    return publish(items, after_first=lambda: crash_point("sweep.mid_batch"))


# Consecutive passes one beat tick may chain (each still bounded by the batch) before the cadence resumes.
MAX_CHAINED_PASSES = 50


def should_chain(report: SweepReport, chained: int, sent_before: int = 0) -> bool:
    """Run the next pass at once instead of at the next beat tick: this pass stopped at its bound, and the
    continuations queue holds no more than what this chain of passes sent (``sent_before`` by the passes
    before this one), so what is still due is not sitting in the broker behind a backlog (there, sending
    it again would only add duplicates)."""
    if not report.full or chained >= MAX_CHAINED_PASSES:
        return False
    queued = continuations_queued()
    return queued is not None and queued <= sent_before + report.published


def continuations_queued() -> int | None:
    """Messages waiting in the continuations queue (``None`` when the broker cannot tell)."""
    return queued(CONTINUATIONS_QUEUE)


def queued(*queues: str) -> int | None:
    """Messages waiting in these queues together (``None`` when the broker cannot tell)."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=0)  # one connect: a broker that is down costs one timeout
            # Declared as configured (idempotent; a passive declare fails where no worker declared it yet).
            return sum(
                int(app.amqp.queues[name].bind(conn.default_channel).queue_declare().message_count) for name in queues
            )
    except Exception as exc:  # every pass reads it: one line while the broker is down, not a traceback each time
        log.warning("could not read the length of %s (%s: %s)", ", ".join(queues), type(exc).__name__, exc)
        return None


def _expired_leases(report: SweepReport, *, batch: int, max_attempts: int) -> list[Due]:
    """Category 1 (claims whose lease ran out → ready again) and 3 (out of attempts → dead): the release is
    one statement for the batch; should it fail, each row is tried on its own, so one bad row is skipped."""
    try:
        with single_statement() as conn:
            found = store.release_expired_claims(conn, batch=batch, max_attempts=max_attempts)
    except Exception as exc:
        if database_unavailable(exc):  # each row would fail the same way: the pass ends with this one error
            raise
        log.exception("sweep: the batch release of expired claims failed; trying each row", extra={"action": "sweep"})
        found = _release_each(report, batch=batch, max_attempts=max_attempts)
    report.counts["lease_expired"] += len(found.released)
    dead_runs = [run_id for cid in found.exhausted if (run_id := _give_up_exhausted(report, cid, max_attempts))]
    project_quietly(dead_runs)
    return found.released


def _release_each(report: SweepReport, *, batch: int, max_attempts: int) -> store.ExpiredClaims:
    """The batch release row by row, each in its savepoint (a bad row counts as an error and is skipped)."""
    found = store.ExpiredClaims([], [])
    with transaction() as session:
        for row in store.expired_claims(session, batch=batch):
            if row.attempts >= max_attempts:
                found.exhausted.append(row.id)
                continue
            try:
                with session.begin_nested():
                    released = store.release_expired_claim(session, row.id)
                if released is not None and not released.remote:  # a remote one is leased, not published
                    found.released.append(
                        Due(released.id, released.kind, released.run_id, released.step_id, released.name)
                    )
            except Exception as exc:
                _skipped(report, exc, continuation_id=row.id)
    return found


def _skipped(report: SweepReport, exc: Exception, **row: str) -> None:
    """The row that made the sweep raise ``exc`` is counted and skipped, unless the database itself failed
    (the session is gone, and every row after it would fail the same way): that ends the pass at once with
    that one error, and the next pass takes the rest up."""
    if database_unavailable(exc):
        raise exc
    report.counts["errors"] += 1
    log.exception("sweep skipped a bad row", extra={"action": "sweep", **row})


def _give_up_exhausted(report: SweepReport, continuation_id: str, max_attempts: int) -> str | None:
    """One expired claim out of attempts → dead (its own statement); its run's id when it was given up."""
    try:
        with single_statement() as conn:
            dead = store.give_up_exhausted(conn, continuation_id, max_attempts=max_attempts)
    except Exception as exc:
        _skipped(report, exc, continuation_id=continuation_id)
        return None
    if dead is None:
        return None
    report.counts["dead"] += 1
    log.warning(dead.reason, extra={"action": "give_up", "continuation_id": continuation_id, "run_id": dead.run_id})
    return dead.run_id


def _failed_closed(report: SweepReport, *, batch: int) -> None:
    """Category 3 for waits: a parked step whose continuation version no live worker has advertised for
    the grace, or whose run's owner lost its grant → its run, step and pending interactions interrupted
    with the reason. Judged by what the fleet advertises, never by this process's own registry."""
    ended: list[str] = []
    with transaction() as session:
        found = {
            "unregistered": fail_closed.unserved_waits(session, grace_s=get_settings().version_grace_s, batch=batch),
            "revoked": fail_closed.revoked_waits(session, batch=batch),
        }
        for category, waits in found.items():
            for wait in waits:
                try:
                    with session.begin_nested():
                        if fail_closed.interrupt_wait(session, wait) is not None:
                            report.counts[category] += 1
                            ended.append(wait.run_id)
                            log.warning(
                                "wait interrupted: %s",
                                wait.reason,
                                extra={"action": "interrupt", "run_id": wait.run_id, "step_id": wait.step_id},
                            )
                except Exception as exc:
                    _skipped(report, exc, step_id=wait.step_id)
    ended += _unserved_remote(report, batch=batch)
    project_quietly(ended)


def _unserved_remote(report: SweepReport, *, batch: int) -> list[str]:
    """Category 3 for due remote continuations (leased, never published): one whose key no live worker has
    advertised for the grace is given up, its run interrupted naming the version, as a Celery worker gives
    up one it cannot hand on (the fleet read again just before). Returns the runs it ended."""
    grace_s = get_settings().version_grace_s
    with transaction() as session:
        found = fail_closed.unserved_remote(session, grace_s=grace_s, batch=batch)
    ended = []
    for work in found:
        try:
            with single_statement() as conn:
                if (
                    store.serving(conn, work.kind, work.key, continuation_id=work.continuation_id).fails_closed(grace_s)
                    is None
                ):
                    continue
                dead = store.give_up(conn, work.continuation_id, reason=work.reason)
        except Exception as exc:
            _skipped(report, exc, continuation_id=work.continuation_id)
            continue
        if dead is not None:
            report.counts["unregistered"] += 1
            ended.append(dead.run_id)
            log.warning("remote work given up: %s", work.reason,
                        extra={"action": "give_up", "continuation_id": dead.id, "run_id": dead.run_id})  # fmt: skip
    return ended


def _expire_interactions(report: SweepReport, *, batch: int) -> list[Due]:
    """Category 2: pending interactions past their expiry → expired; the continuation may become due."""
    due: list[Due] = []
    with transaction() as session:
        for interaction_id in store.expirable_interactions(session, batch=batch):
            try:
                with session.begin_nested():
                    expiry = store.expire_due(session, interaction_id)
                    if expiry.expired:
                        report.counts["expired"] += 1
                    if expiry.continuation is not None and not expiry.continuation.remote:  # remote: leased
                        due.append(expiry.continuation)
            except Exception as exc:
                _skipped(report, exc, interaction_id=interaction_id)
    return due


def _team_timers(report: SweepReport, *, batch: int) -> None:
    """Category 7: pending waits whose next reminder or escalation level is due -> written once each, with
    its event (models/store/timers.py); each a statement for the batch."""
    with transaction() as session:
        report.counts["reminded"] += len(store.remind_due(session, batch=batch))
    with transaction() as session:
        report.counts["escalated"] += len(store.escalate_due(session, batch=batch))


def _stale_ready(report: SweepReport, *, batch: int, older_than_s: float) -> list[Due]:
    """Category 1: ready continuations not enqueued recently (publish lost, broker flushed) → again; no more
    of them than the steps and continuations queues cannot be holding (a broker that cannot tell: up to the
    batch). A backlog older than the delay is not lost: sent again, it would grow with each pass. Each is
    routed to whoever serves its key now: work only remote workers serve is left to their leases, and
    remote work no lease took that a Celery worker serves is published to it."""
    report.queued = queued(STEPS_QUEUE, CONTINUATIONS_QUEUE)
    with transaction() as session:
        rows = store.mark_for_republish(session, older_than_s=older_than_s, batch=batch, queued=report.queued or 0)
        rows += store.reroute_to_celery(session, older_than_s=older_than_s, batch=batch)
    report.counts["republished"] += len(rows)
    return rows


def _stranded_reviews(report: SweepReport, *, batch: int) -> None:
    """Category 4: running reviews whose owner is gone → interrupted, counts kept, evidence in the reason:
    one statement for the batch; should it fail, each row is tried in its savepoint (a bad row is skipped)."""
    try:
        with single_statement() as conn:
            report.counts["reviews_interrupted"] += len(store.interrupt_stranded_reviews(conn, batch=batch))
        return
    except Exception as exc:
        if database_unavailable(exc):  # as for the expired claims: no row-by-row retry against a failed database
            raise
        log.exception(
            "sweep: the batch interrupt of stranded reviews failed; trying each row", extra={"action": "sweep"}
        )
    with transaction() as session:
        for review in store.stranded_reviews(session, batch=batch):
            try:
                with session.begin_nested():
                    if store.interrupt_review(session, review.id) is not None:
                        report.counts["reviews_interrupted"] += 1
            except Exception as exc:
                _skipped(report, exc, run_id=review.run_id)


def _projections(report: SweepReport, *, batch: int) -> None:
    """Category 5: terminal runs whose projections do not agree yet and are due → write them again (a run
    whose write failed is due again only after its back-off, so it never holds back newer ones). First the
    projection cursor's pass (``catch_up``): the runs that ended since it last moved, whose files a worker
    that died before its projector ran never wrote."""
    try:
        report.counts["projections"] += catch_up()  # bounded by its own batch of the log
    except Exception as exc:
        _skipped(report, exc)
    with transaction() as session:
        run_ids = projections.pending_projections(session, batch=batch)
    for run_id in run_ids:
        try:
            if project(run_id):
                report.counts["projections"] += 1
        except Exception as exc:
            _skipped(report, exc, run_id=run_id)


def _webhooks(report: SweepReport, *, batch: int, republish_after_s: float) -> None:
    """Category 6: active subscriptions that are due, unclaimed and behind the newest final event → a
    delivery task each (published after the commit that marked them; a lost message is sent again after
    ``republish_after_s``). This is how new events reach receivers: the answer path writes nothing for them."""
    with transaction() as session:
        webhook_ids = store.due_webhooks(session, batch=batch, republish_after_s=republish_after_s)
    report.counts["webhooks"] += len(webhook_ids)
    publish_webhooks(webhook_ids)


def _seal(report: SweepReport, *, batch: int) -> None:
    """Category 8: the next up to ``batch`` final events sealed as one signed checkpoint of the event log's
    hash chain (a concurrent pass that sealed that checkpoint first leaves this one nothing to do)."""
    with transaction() as session:
        sealed = seal_next(session, batch=batch)
        crash_point("seal.mid_batch")  # the checkpoint written, not committed: the next pass seals it again
    report.counts["sealed"] += sealed.count if sealed is not None else 0


@app.task(name=SWEEP, ignore_result=True, acks_late=False)
def sweep_task(chained: int = 0, sent: int = 0) -> dict[str, Any]:
    """One recovery sweep pass (beat cadence and worker start); a pass that stopped at its bound while the
    queue is not backlogged sends the next pass at once (``should_chain``), so a crash's leftovers are
    re-driven as fast as the workers take them rather than one batch per beat tick."""
    try:
        report = run_sweep()
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        log.warning("sweep pass ended: the database is unavailable (%s)", failure_line(exc), extra={"action": "sweep"})
        return {"database_unavailable": True, "chained": chained}
    if should_chain(report, chained, sent):
        app.send_task(SWEEP, kwargs={"chained": chained + 1, "sent": sent + report.published}, queue=SWEEP_QUEUE)
    return {**report.as_dict(), "chained": chained}


schedule.install(app, get_settings())  # the sweep task and its cadence are registered together
