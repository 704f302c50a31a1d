"""``parkway webhook …`` run as a subprocess against the test database: the same subscriptions, checks and
outcomes as the admin API (docs/webhooks.md)."""

from __future__ import annotations

import json

from models.webhook_tables import Webhook
from parkway.crypto import unseal
from parkway.db import transaction
from tests.support import Stack

URL = "http://127.0.0.1:9/hook"


def test_webhook__create_show_disable_enable_rotate_replay_delete(stack: Stack) -> None:
    made = stack.parkway("webhook", "create", "--url", URL, "--events", "run.completed,interaction.*",
                         "--target", "team:ops")  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("whsec_") and len(made.stdout.splitlines()) == 1
    webhook_id = made.stderr.split("webhook ", 2)[2].split()[0]
    with transaction() as session:
        row = session.get(Webhook, webhook_id)
        assert row is not None and unseal(row.secret_sealed) == secret and row.targets == ["team:ops"]

    listed = stack.parkway("webhook", "list")
    assert listed.returncode == 0 and webhook_id in listed.stdout and secret not in listed.stdout
    shown = json.loads(stack.parkway("webhook", "show", webhook_id).stdout)
    assert shown["events"] == ["run.completed", "interaction.*"] and "secret" not in json.dumps(shown)
    assert json.loads(stack.parkway("webhook", "disable", webhook_id).stdout)["status"] == "disabled"
    assert json.loads(stack.parkway("webhook", "enable", webhook_id).stdout)["status"] == "active"

    rotated = stack.parkway("webhook", "rotate", webhook_id, "--overlap-s", "60")
    assert rotated.returncode == 0 and rotated.stdout.strip().startswith("whsec_")
    assert rotated.stdout.strip() != secret
    cursor = shown["cursor"]
    replayed = stack.parkway("webhook", "replay", webhook_id, "--after-seq", str(cursor - 1))
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["cursor"] == cursor - 1
    ahead = stack.parkway("webhook", "replay", webhook_id, "--after-seq", str(cursor + 10))
    assert ahead.returncode == 1 and "goes back only" in ahead.stderr

    assert stack.parkway("webhook", "delete", webhook_id).returncode == 0
    gone = stack.parkway("webhook", "show", webhook_id)
    assert gone.returncode == 1 and "no webhook has the id" in gone.stderr


def test_webhook__bad_input_is_refused_with_nothing_stored(stack: Stack) -> None:
    with transaction() as session:
        before = session.query(Webhook).count()
    for args in (["--url", URL, "--events", "run.finished"], ["--url", "http://10.0.0.1/", "--events", "*"],
                 ["--url", "ftp://127.0.0.1/", "--events", "*"], ["--url", URL, "--events", ","]):  # fmt: skip
        refused = stack.parkway("webhook", "create", *args)
        assert refused.returncode == 1 and refused.stdout == "" and "Traceback" not in refused.stderr, refused.stderr
    with transaction() as session:
        assert session.query(Webhook).count() == before
