"""Where a webhook may be sent: http(s) URLs whose host resolves only to public addresses, or to addresses
inside ``PARKWAY_WEBHOOK_ALLOWED_NETWORKS``. Checked when a URL is saved and again on every connection
(the resolved, checked address is the one connected to), so a DNS answer that changes later cannot
point a delivery at a private service."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from parkway.errors import ParkwayError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeUrl(ParkwayError):
    """Raised when a webhook URL is not http(s), or its host resolves to an address it may not reach."""


def split_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL; ``UnsafeUrl`` for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeUrl("a webhook URL is http:// or https:// with a host")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def checked_addresses(host: str, port: int, allowed: Sequence[Network]) -> list[Address]:
    """Every address ``host`` resolves to, each checked; ``UnsafeUrl`` if it resolves to none, or to any
    that is not public and not inside ``allowed`` (one bad answer refuses the host: no picking)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeUrl(f"the host {host!r} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise UnsafeUrl(f"the host {host!r} does not resolve")
    for address in addresses:
        if not address.is_global and not any(address in network for network in allowed):
            raise UnsafeUrl(
                f"the host {host!r} resolves to {address}, a private, loopback or link-local address "
                "(PARKWAY_WEBHOOK_ALLOWED_NETWORKS can allow it)"
            )
    return addresses


def check_url(url: str, allowed: Sequence[Network]) -> list[Address]:
    """The checked addresses of an http(s) URL's host; ``UnsafeUrl`` when it may not be reached."""
    _, host, port = split_url(url)
    return checked_addresses(host, port, allowed)
