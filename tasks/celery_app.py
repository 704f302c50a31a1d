"""The Celery app (``tasks.celery_app:app``), configured for exactly-once continuations.

Late acks with reject-on-worker-lost, prefetch 1, no results, ids-only JSON arguments, named queues,
and one database engine per worker child made after fork.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import Celery, signals
from celery.utils.nodenames import worker_direct
from kombu.entity import Exchange, Queue

from parkway import fsbroker, tracing
from parkway.errors import ConfigError
from parkway.settings import Settings, get_settings

fsbroker.install()  # before any connection: ``filesystem://`` writes each message file atomically

log = logging.getLogger("parkway.worker")

STEPS_QUEUE = "parkway.steps"
CONTINUATIONS_QUEUE = "parkway.continuations"
SWEEP_QUEUE = "parkway.sweep"
WEBHOOKS_QUEUE = "parkway.webhooks"
PUSH_QUEUE = "parkway.push"

RUN_STEP = "parkway.run_step"
RESUME_STEP = "parkway.resume_step"
SWEEP = "parkway.sweep"
DELIVER_WEBHOOK = "parkway.deliver_webhook"
PUSH_STEP = "parkway.push_step"

BROKER_CONNECT_TIMEOUT_S = 2.0  # one connect to the broker, at most (a local or LAN Redis answers in ms)


def _queue(name: str) -> Queue:
    # Each queue its own direct exchange and key: a message lands in exactly one queue.
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def broker_options(settings: Settings) -> dict[str, Any]:
    if not settings.filesystem_broker:
        # Redis redelivers unacked messages after this; keep it above the longest step body. A connect
        # is bounded (redis-py waits for the OS otherwise): an unreachable broker costs a publish that much.
        return {"visibility_timeout": 6 * 3600, "socket_connect_timeout": BROKER_CONNECT_TIMEOUT_S}
    folder = settings.broker_folder
    for sub in ("queue", "control", "processed"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
        "polling_interval": 0.2,
    }


def configure(app: Celery, settings: Settings) -> None:
    app.conf.update(
        broker_url=settings.effective_broker_url,
        broker_transport_options=broker_options(settings),
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        task_queues=tuple(
            _queue(q) for q in (STEPS_QUEUE, CONTINUATIONS_QUEUE, SWEEP_QUEUE, WEBHOOKS_QUEUE, PUSH_QUEUE)
        ),
        task_default_queue=CONTINUATIONS_QUEUE,
        task_routes={
            RUN_STEP: {"queue": STEPS_QUEUE},
            RESUME_STEP: {"queue": CONTINUATIONS_QUEUE},
            SWEEP: {"queue": SWEEP_QUEUE},
            DELIVER_WEBHOOK: {"queue": WEBHOOKS_QUEUE},  # a slow receiver never holds up a continuation
            PUSH_STEP: {"queue": PUSH_QUEUE},  # nor a slow push handler (tasks.push)
        },
        task_publish_retry_policy={"max_retries": 3, "interval_start": 0.1, "interval_step": 0.5},
        # A lost broker connection leaves running bodies alone (Celery 6 turns this on by default): the
        # execution keeps its lease and commits; the broker's redelivery finds the claim held and is
        # dropped. Cancelling would cut short every body in flight, a tool's effect then "possibly ran".
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Task events off by default (a broker publish per task state, and one per publish in every producer):
        # Flower turns a worker's on at run time (``celery control enable_events``), ``worker -E`` at start.
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        imports=["tasks.worker", "tasks.webhooks", "tasks.push", "beat.sweep", *settings.import_modules],
        # Each worker also consumes a queue of its own: where a worker that does not run a version hands a
        # delivery on to one that does (tasks.worker).
        worker_direct=True,
        # The schedule itself is beat's (beat.schedule); its file is named here: beat reads it before loading modules.
        beat_schedule_filename=str(settings.broker_folder.parent / "celerybeat-schedule"),
    )


def _settings_or_refuse() -> Settings:
    """This process's settings; a worker, beat or API refuses to start on invalid ones, in one line."""
    try:
        return get_settings()
    except ConfigError as exc:
        sys.stderr.write(f"parkway: refusing to start: {exc}\n")
        raise SystemExit(3) from None


app = Celery("parkway")
configure(app, _settings_or_refuse())
app.steps["worker"].add("tasks.fleet:Heartbeat")
app.steps["worker"].add("tasks.ready:ReadyListener")  # publishes what parkway run start committed


def _guard_schema(process: str) -> None:
    """Refuse to start (exit 3, one line) when ``parkway.startup.start_problem`` says why."""
    from parkway.startup import start_problem

    problem = start_problem(process)
    if problem is not None:
        sys.stderr.write(f"parkway {process}: refusing to start: {problem}\n")
        raise SystemExit(3)


@signals.import_modules.connect(sender=app)  # this app's worker or beat only
def _on_import_modules(**_: Any) -> None:
    """Before a worker or beat imports ``PARKWAY_IMPORTS``: one line naming a module that is not there."""
    problem = get_settings().imports_problem()
    if problem is not None:
        sys.stderr.write(f"parkway: refusing to start: {problem}\n")
        raise SystemExit(3)


@signals.setup_logging.connect
def _on_setup_logging(loglevel: Any = None, **_: Any) -> None:
    """Celery's processes log structured lines too (JSON when not a terminal); Celery adds no handler. The
    sweep's own lines are Celery's at DEBUG: an idle pass says nothing, a busy one its sentence (beat/report.py)."""
    from parkway.logs import setup_logging

    level = logging.getLevelName(loglevel) if isinstance(loglevel, str) else (loglevel or logging.INFO)
    setup_logging(level if isinstance(level, int) else logging.INFO, root=True, quiet_tasks=(SWEEP,))


@signals.worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    """Refuse a schema this code does not match; warn of workflow references that do not resolve; then say
    what this worker runs, before it takes a task. The outbound worker (only the webhooks and push queues)
    runs no bodies: it advertises nothing and takes no hand-on (no queue of its own)."""
    from tasks import fleet

    _guard_schema("worker")
    if _outbound(sender):
        sender.app.amqp.queues.deselect(worker_direct(sender.hostname).name)
        fleet.start(sender.hostname, serving=False)
        return
    _warn_references()
    fleet.start(sender.hostname)


OUTBOUND = frozenset({WEBHOOKS_QUEUE, PUSH_QUEUE})


def _outbound(worker: Any) -> bool:
    """The worker consumes outbound queues only (webhook deliveries and pushes): no step body reaches it."""
    consumed = set(worker.app.amqp.queues.consume_from) - {worker_direct(worker.hostname).name}
    return bool(consumed) and consumed <= OUTBOUND


def _warn_references() -> None:
    """A warning (a line each) for a reference of the workflow modules that resolves neither in this worker
    nor in the live fleet (``parkway check`` reports it too): the worker starts all the same, and its work
    waits for a worker that serves it (a fleet split by module starts in any order)."""
    from tasks import wiring

    problems = wiring.unserved(wiring.check_workflows().problems)
    if problems:
        log.warning("%s, no live worker runs them now (their work waits for one):\n%s", wiring.count_text(problems),
                    "\n".join(problem.line_text() for problem in problems), extra={"action": "check"})  # fmt: skip


@signals.beat_init.connect
def _on_beat_init(**_: Any) -> None:
    _guard_schema("beat")


@signals.task_prerun.connect
def _on_task_start(task_id: str | None = None, args: Any = None, **_: Any) -> None:
    """Lines Celery writes about a task (its outcome) carry the continuation id as well."""
    from parkway.logs import set_context

    ids: dict[str, Any] = {"task_id": task_id}
    if args and isinstance(args[0], str):
        ids["continuation_id"] = args[0]
    set_context(ids)


@signals.task_postrun.connect
def _on_task_end(**_: Any) -> None:
    from parkway.logs import set_context

    set_context(None)


@signals.worker_process_init.connect
def _on_child_start(**_: Any) -> None:
    # Never reuse the parent's pooled connections in a forked child.
    from parkway.db import reset_engine

    reset_engine()
    tracing.setup("parkway-worker")  # in the child (docs/operations.md "Tracing"): nothing unless OTEL_* asks


@signals.worker_process_shutdown.connect
def _on_child_end(**_: Any) -> None:
    tracing.flush()  # the spans still batched


@signals.worker_ready.connect
def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    """Send one recovery sweep at worker start: whatever a crash left behind is re-driven now."""
    try:
        app.send_task(SWEEP, queue=SWEEP_QUEUE)
    except Exception:  # the beat cadence sweeps again soon; never stop the worker for this
        log.exception("could not send the startup sweep")
