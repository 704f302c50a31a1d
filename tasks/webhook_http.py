"""One webhook request: signed as the Standard Webhooks specification says, sent to the address checked at
connect time, no redirect followed, the response body read up to a bound."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit, urlunsplit

import httpx

from parkway.netguard import UnsafeUrl, checked_addresses, split_url
from parkway.settings import get_settings

MAX_RESPONSE_BYTES = 64 * 1024  # a receiver's answer is read this far, then the connection closed
# httpx bounds each phase (connect, send, each read) by the timeout, not the request: with the body's reading
# cut at the timeout too, one request lasts at most this many timeouts (the delivery claim's lease covers it).
PHASES = 4


@dataclass(frozen=True)
class Sent:
    """What one attempt got: a status code, or an error (no answer); ``retry_after_s`` from a 429."""

    status_code: int | None
    latency_ms: int
    error: str | None = None
    retry_after_s: float | None = None
    body: bytes = b""  # what was read of the answer (up to the bound)
    cut: bool = False  # the answer went past the bound or the deadline: ``body`` is not all of it

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def message_id(webhook_id: str, seq: int) -> str:
    """``webhook-id``: the same on every attempt at one event, so a receiver can deduplicate."""
    return f"msg_{webhook_id}_{seq}"


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``, keyed with the secret's bytes after ``whsec_``."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def client() -> httpx.Client:
    """The HTTP client of one delivery run: its requests to the receiver share kept-alive connections (one
    client per request cost more than the request itself: bench/RESULTS.md, "Webhooks")."""
    return httpx.Client(timeout=get_settings().webhook_timeout_s, follow_redirects=False, trust_env=False)


def post(
    http: httpx.Client,
    url: str,
    *,
    secrets: list[str],
    msg_id: str,
    body: bytes,
    max_bytes: int = MAX_RESPONSE_BYTES,
    agent: str = "parkway-webhooks",
) -> Sent:
    """POST ``body`` to ``url`` through ``http``, signed with each secret (a rotation's overlap:
    space-separated signatures, any of which verifies); never raises for what the network or the receiver
    did. The address is checked on every request, and the request goes to the checked address. The answer's
    body is read up to ``max_bytes``."""
    settings = get_settings()
    started = time.monotonic()
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(secret, msg_id, timestamp, body) for secret in secrets),
        "user-agent": agent,
    }
    try:
        _, host, port = split_url(url)
        address = checked_addresses(host, port, settings.webhook_networks)[0]
        parts = urlsplit(url)
        pinned = urlunsplit(
            parts._replace(netloc=f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}")
        )
        headers["host"] = parts.netloc.rsplit("@", 1)[-1]
        # Connect to the checked address; TLS still names (and verifies) the host of the URL.
        with http.stream("POST", pinned, content=body, headers=headers, extensions={"sni_hostname": host}) as answer:
            read, cut, deadline = bytearray(), False, started + settings.webhook_timeout_s
            for chunk in answer.iter_bytes():  # a receiver trickling its answer is cut off, not waited for
                read += chunk
                if len(read) > max_bytes or time.monotonic() > deadline:
                    cut = True
                    break
            retry_after = _retry_after(answer.headers.get("retry-after")) if answer.status_code == 429 else None
            return Sent(answer.status_code, _ms(started), retry_after_s=retry_after, body=bytes(read), cut=cut)
    except UnsafeUrl as exc:
        return Sent(None, _ms(started), error=str(exc))
    except httpx.TimeoutException:
        return Sent(None, _ms(started), error=f"timed out after {settings.webhook_timeout_s:g} s")
    except httpx.HTTPError as exc:
        return Sent(None, _ms(started), error=f"{type(exc).__name__}: {exc}"[:500])


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number of seconds, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
