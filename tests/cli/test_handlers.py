"""``parkway handler …`` run as a subprocess against the test database: the same push handlers and checks as
``/v1/handlers`` (docs/worker-protocol.md, "Push")."""

from __future__ import annotations

from models import store
from models.webhook_tables import PushHandler
from parkway.crypto import unseal
from parkway.db import transaction
from tests.support import Stack

URL = "http://127.0.0.1:9/push"


def test_handler__create_list_delete(stack: Stack) -> None:
    made = stack.parkway("handler", "create", "--url", URL, "--serves", "cli.step,cli.after@2")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("whsec_") and len(made.stdout.splitlines()) == 1
    handler_id = made.stderr.split("handler ", 2)[2].split()[0]
    with transaction() as session:
        row = session.get(PushHandler, handler_id)
        assert row is not None and unseal(row.secret_sealed) == secret and row.serves == ["cli.after@2", "cli.step"]
        assert [w.node for w in store.live_workers(session)].count(f"push:{handler_id}") == 1

    listed = stack.parkway("handler", "list")
    assert listed.returncode == 0 and handler_id in listed.stdout and secret not in listed.stdout

    bad = stack.parkway("handler", "create", "--url", URL, "--serves", "cli.after@0")
    assert bad.returncode == 1 and "name@version" in bad.stderr
    private = stack.parkway("handler", "create", "--url", "http://10.1.2.3/push", "--serves", "x")
    assert private.returncode == 1 and "PARKWAY_WEBHOOK_ALLOWED_NETWORKS" in private.stderr

    assert stack.parkway("handler", "delete", handler_id).returncode == 0
    gone = stack.parkway("handler", "delete", handler_id)
    assert gone.returncode == 1 and "no handler has the id" in gone.stderr
    with transaction() as session:
        assert f"push:{handler_id}" not in [w.node for w in store.live_workers(session)]
