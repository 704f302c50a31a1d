"""What a receiver checks, without I/O: our signature verifies with the ``standardwebhooks`` package, the
URL guard refuses what it must, and the webhook settings read and refuse as documented."""

from __future__ import annotations

import base64
import json
import time
from typing import get_args

import pytest
import standardwebhooks
from pydantic import ValidationError

from api.event_schemas import FAMILIES
from models.webhooks import EVENT_TYPES, unknown_event_types
from parkway.netguard import UnsafeUrl, check_url, split_url
from parkway.settings import Settings
from tasks.webhook_http import _retry_after, message_id, signature

SECRET = "whsec_" + base64.b64encode(bytes(range(24))).decode()


def test_signature__verifies_with_the_specifications_library() -> None:
    body = json.dumps({"type": "run.completed", "timestamp": "2026-12-04T00:00:00+00:00", "data": {}}).encode()
    msg_id, now = message_id("abc", 42), int(time.time())
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(now),
        "webhook-signature": signature(SECRET, msg_id, now, body),
    }
    assert standardwebhooks.Webhook(SECRET).verify(body, headers)["type"] == "run.completed"
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(body + b" ", headers)
    assert message_id("abc", 42) == msg_id  # the same id on every attempt at one event


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "example.com/hook", "http:///x", "http://127.0.0.1:99999/", "http://10.0.0.1/"]
)
def test_check_url__refuses_what_a_webhook_may_not_reach(url: str) -> None:
    with pytest.raises(UnsafeUrl):
        check_url(url, [])


def test_check_url__an_allowed_network_lets_a_private_address_through() -> None:
    allowed = Settings(webhook_allowed_networks="127.0.0.0/8, 10.0.0.0/8").webhook_networks  # type: ignore[call-arg]
    assert [str(a) for a in check_url("http://127.0.0.1:8080/hook", allowed)] == ["127.0.0.1"]
    assert split_url("https://127.0.0.1/hook") == ("https", "127.0.0.1", 443)
    with pytest.raises(UnsafeUrl, match=r"169\.254\.169\.254"):
        check_url("http://169.254.169.254/", allowed)


def test_event_types__types_families_and_star() -> None:
    assert unknown_event_types(["run.completed", "interaction.*", "*", "review.interrupted"]) == []
    assert unknown_event_types(["run.complete", "runs.*", "interaction"]) == ["run.complete", "runs.*", "interaction"]


def test_event_types__are_the_types_the_event_log_writes() -> None:
    """A subscription may name each type the API describes (``step.resumed``, ``interaction.responded``) and
    ``webhook.failing``, and nothing the log never holds (``step.resuming`` is a derived status, no event)."""
    written = {t for cls in FAMILIES.values() for t in get_args(cls.model_fields["type"].annotation)}
    assert set(EVENT_TYPES) == written | {"webhook.failing"}
    assert unknown_event_types(["step.resumed", "interaction.responded"]) == []
    assert unknown_event_types(["step.resuming"]) == ["step.resuming"]


def test_settings__webhook_values_read_and_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PARKWAY_WEBHOOK_RETRY_S", "PARKWAY_WEBHOOK_TIMEOUT_S", "PARKWAY_WEBHOOK_ALLOWED_NETWORKS"):
        monkeypatch.delenv(name, raising=False)
    defaults = Settings()
    assert defaults.webhook_retry_delays == [5, 300, 1800, 7200, 18000, 36000, 36000]
    assert defaults.webhook_timeout_s == 15 and defaults.webhook_networks == []
    assert Settings(webhook_retry_s="0.2, 1").webhook_retry_delays == [0.2, 1.0]  # type: ignore[call-arg]
    for bad in ({"webhook_allowed_networks": "10.0.0.0/33"}, {"webhook_retry_s": "5,-1"}, {"webhook_retry_s": "x"}):
        with pytest.raises(ValidationError):
            Settings(**bad)  # type: ignore[arg-type]


def test_retry_after__seconds_or_an_http_date() -> None:
    assert _retry_after("3") == 3.0 and _retry_after(None) is None and _retry_after("soon") is None
    assert 0 <= (_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") or 0) <= 1  # in the past: now
