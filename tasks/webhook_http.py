"""One webhook request: signed as the Standard Webhooks specification says, sent to the address checked at
connect time, no redirect followed, the response body read up to a bound.

Requests go through the standard library's ``http.client`` on kept-alive connections (``Connections``):
a request is one write and one read on a socket already open, so sending an event costs little beside the
event itself (bench/RESULTS.md, "Webhooks"). The host is resolved and its address checked when a connection
opens; a connection is used for ``MAX_AGE_S`` at most, so a DNS answer that changed is seen that soon."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from parkway import netguard
from parkway.netguard import Address, Exposed, Network, UnsafeUrl, checked_addresses, split_url
from parkway.settings import get_settings

MAX_RESPONSE_BYTES = 64 * 1024  # a receiver's answer is read this far, then the connection closed
# The timeout bounds each phase (connect, send, each read), not the request: with the body's reading cut at
# the timeout too, one request lasts at most this many timeouts (the delivery claim's lease covers it).
PHASES = 4
CHUNK = 16 * 1024
# A kept-alive connection the receiver closed while it was idle fails like this on its next request,
# before the request reached anyone: sent again once, on a new connection.
STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
MAX_AGE_S = 60.0  # a kept-alive connection is reused this long, then the host resolved and checked again
Origin = tuple[str, str, int]  # scheme, host, port


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


class _Pinned(http.client.HTTPConnection):
    """A connection to a checked address that names the URL's host (``Host``; over TLS the server name,
    verified against the certificate)."""

    def __init__(self, address: Address, host: str, port: int, timeout: float, tls: ssl.SSLContext | None):
        super().__init__(host, port, timeout=timeout)
        self.address, self.tls = address, tls
        self.opened = time.monotonic()

    def connect(self) -> None:
        sock = socket.create_connection((str(self.address), self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host) if self.tls else sock


class Connections:
    """The kept-alive connections of one sender (a delivery run, or a worker process's pushes): one per
    origin, to the address its host resolved to and that was checked when it opened; dropped when the answer
    says so or was cut, and not reused past ``max_age_s``."""

    def __init__(self, timeout_s: float, allowed: Sequence[Network], *, max_age_s: float = MAX_AGE_S) -> None:
        self.timeout_s, self.allowed, self.max_age_s = timeout_s, allowed, max_age_s
        self._open: dict[Origin, _Pinned] = {}
        self._tls: ssl.SSLContext | None = None

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()
        self._open.clear()

    def connection(self, origin: Origin, *, confidential: bool = False) -> tuple[_Pinned, bool]:
        """The origin's open connection, or a new one to its host's checked address (``UnsafeUrl`` when it
        may not be reached); ``True`` if it was open. ``confidential``: ``Exposed`` unless that address may
        receive sensitive values (``netguard.confidential``)."""
        held = self._open.get(origin)
        reused = held is not None and time.monotonic() - held.opened < self.max_age_s
        connection = held if held is not None and reused else self._opened(origin)
        if confidential and not netguard.confidential(origin[0], connection.address, self.allowed):
            raise Exposed(f"{origin[1]!r} is plain http to {connection.address}, outside the allowed networks")
        return connection, reused

    def _opened(self, origin: Origin) -> _Pinned:
        """A new connection (not connected yet) to the origin's host's checked address, in place of any other."""
        self.drop(origin)
        scheme, host, port = origin
        address = checked_addresses(host, port, self.allowed)[0]
        if scheme == "https" and self._tls is None:
            self._tls = ssl.create_default_context()
        self._open[origin] = _Pinned(address, host, port, self.timeout_s, self._tls if scheme == "https" else None)
        return self._open[origin]

    def drop(self, origin: Origin) -> None:
        connection = self._open.pop(origin, None)
        if connection is not None:
            connection.close()


def client() -> Connections:
    """A sender with this process's settings: the requests of one delivery run (or of a worker process's
    pushes) to one receiver share a kept-alive connection."""
    settings = get_settings()
    return Connections(settings.webhook_timeout_s, settings.webhook_networks)


def post(
    sender: Connections,
    url: str,
    *,
    secrets: list[str],
    msg_id: str,
    body: bytes,
    max_bytes: int = MAX_RESPONSE_BYTES,
    agent: str = "parkway-webhooks",
    confidential: bool = False,
    traceparent: str | None = None,
) -> Sent:
    """POST ``body`` to ``url`` through ``sender``, signed with each secret (a rotation's overlap:
    space-separated signatures, any of which verifies); never raises for what the network or the receiver
    did. The request goes to the address checked when its connection opened. The answer's body is read up
    to ``max_bytes``. ``confidential`` (the body holds sensitive values): ``Exposed`` is raised, before
    anything is sent, when the URL is plain http to an address outside the allowed networks. ``traceparent``
    (when traced): sent as the W3C header, so the receiver's spans continue the sender's trace."""
    started = time.monotonic()
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(secret, msg_id, timestamp, body) for secret in secrets),
        "user-agent": agent,
    }
    if traceparent:
        headers["traceparent"] = traceparent
    try:
        request = _Request(split_url(url), _target(url), headers, body, confidential)
        return _exchange(sender, request, max_bytes, started)
    except UnsafeUrl as exc:
        return Sent(None, _ms(started), error=str(exc))
    except TimeoutError:
        return Sent(None, _ms(started), error=f"timed out after {sender.timeout_s:g} s")
    except (OSError, http.client.HTTPException) as exc:
        return Sent(None, _ms(started), error=f"{type(exc).__name__}: {exc}"[:500])


@dataclass(frozen=True)
class _Request:
    """One POST, as ``_exchange`` sends it."""

    origin: Origin
    target: str  # path and query
    headers: dict[str, str]
    body: bytes
    confidential: bool  # only to an address sensitive values may go to (``Connections.connection``)


def _exchange(sender: Connections, request: _Request, max_bytes: int, started: float) -> Sent:
    """One request and its answer on the origin's connection; the connection is dropped after an error, a
    cut answer, or an answer that closes it."""
    read, cut, deadline = bytearray(), False, started + sender.timeout_s
    try:
        answer = _request(sender, request)
        while chunk := answer.read1(CHUNK):  # a receiver trickling its answer is cut off, not waited for
            read += chunk
            if len(read) > max_bytes or time.monotonic() > deadline:
                cut = True
                break
    except BaseException:
        sender.drop(request.origin)
        raise
    if cut or answer.will_close:
        sender.drop(request.origin)
    else:
        answer.close()  # read to its end: the connection takes the next request
    retry_after = _retry_after(answer.getheader("retry-after")) if answer.status == 429 else None
    return Sent(answer.status, _ms(started), retry_after_s=retry_after, body=bytes(read), cut=cut)


def _request(sender: Connections, request: _Request) -> http.client.HTTPResponse:
    """Send the request and read the answer's head; on a kept-alive connection the receiver closed while it
    was idle, once more on a new one."""
    connection, reused = sender.connection(request.origin, confidential=request.confidential)
    try:
        connection.request("POST", request.target, body=request.body, headers=request.headers)
        return connection.getresponse()
    except STALE:
        if not reused:
            raise
    sender.drop(request.origin)
    connection, _ = sender.connection(request.origin, confidential=request.confidential)
    connection.request("POST", request.target, body=request.body, headers=request.headers)
    return connection.getresponse()


def _target(url: str) -> str:
    """The request target of ``url``: its path and query (``/`` when it has no path)."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


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
