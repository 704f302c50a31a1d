"""Where a webhook or a push may be sent: http(s) URLs whose host resolves only to public addresses, or to
addresses inside ``PARKWAY_WEBHOOK_ALLOWED_NETWORKS``. Checked when a URL is saved and again on every connection
(the resolved, checked address is the one connected to), so a DNS answer that changes later cannot
point a delivery at a private service.

An IPv6 address that carries an IPv4 address is judged by that address: IPv4-mapped (``::ffff:0:0/96``: the
connection goes to the IPv4 address itself), IPv4-compatible (``::/96``), NAT64 (``64:ff9b::/96``) and 6to4
(``2002::/16``). The IPv4 address inside the last three is reached elsewhere, through a translator or a relay,
so only an allowed network that holds the IPv6 address itself lets such a non-public one through. The
local-use NAT64 prefix and Teredo hide their IPv4 address (no fixed place; obfuscated behind a relay): both
are refused unless allowed."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from parkway.errors import ParkwayError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_V6 = ipaddress.IPv6Network
_V4 = ipaddress.IPv4Network

NAT64 = _V6("64:ff9b::/96")
COMPATIBLE = _V6("::/96")
HIDDEN = ((_V6("64:ff9b:1::/48"), "a local-use NAT64 address"), (_V6("2001::/32"), "a Teredo address"))
# Non-public ranges that Python's ``is_*`` properties do not name; anything else not global is "reserved".
NAMED: tuple[tuple[Network, str], ...] = (
    *((_V4(n), "a private") for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    (_V4("100.64.0.0/10"), "a shared"),
    (_V6("fc00::/7"), "a unique-local"),
    (_V6("fec0::/10"), "a site-local"),
)


class UnsafeUrl(ParkwayError):
    """Raised when a webhook URL is not http(s), or its host resolves to an address it may not reach."""


class Exposed(ParkwayError):
    """Raised before connecting when sensitive values would go over plain http outside the allowed networks."""


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
    that may not be reached (``refusal``): one bad answer refuses the host, no picking."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeUrl(f"the host {host!r} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise UnsafeUrl(f"the host {host!r} does not resolve")
    for address in addresses:
        why = refusal(address, allowed)
        if why is not None:
            raise UnsafeUrl(f"the host {host!r} resolves to {why} (PARKWAY_WEBHOOK_ALLOWED_NETWORKS can allow it)")
    return addresses


def check_url(url: str, allowed: Sequence[Network]) -> list[Address]:
    """The checked addresses of an http(s) URL's host; ``UnsafeUrl`` when it may not be reached."""
    _, host, port = split_url(url)
    return checked_addresses(host, port, allowed)


def refusal(address: Address, allowed: Sequence[Network]) -> str | None:
    """Why ``address`` may not be reached (it, and the form it has, named), or ``None``: it is public, or
    inside an allowed network."""
    if _allowed(address, allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        hidden = next((name for network, name in HIDDEN if address in network), None)
        if hidden is not None:
            return f"{address}, {hidden}"
        carried = _embedded(address)
        if carried is not None:
            form, inner = carried
            kind = _kind(inner)
            return None if kind is None else f"{address}, the {form} form of {inner}, {kind} address"
    kind = _kind(address)
    return None if kind is None else f"{address}, {kind} address"


def _allowed(address: Address, allowed: Sequence[Network]) -> bool:
    """Whether an allowed network holds ``address`` (an IPv4-mapped one: or the IPv4 address it connects to)."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return any(address in network or (mapped is not None and mapped in network) for network in allowed)


def _embedded(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The form in which ``address`` carries an IPv4 address, and that address; ``None`` when it carries none."""
    low = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if address in NAT64:
        return "NAT64", low
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    if address in COMPATIBLE and int(address) > 1:  # :: and ::1 are the unspecified and loopback addresses
        return "IPv4-compatible", low
    return None


def confidential(scheme: str, address: Address, allowed: Sequence[Network]) -> bool:
    """Whether sensitive values may travel to ``address`` over ``scheme``: over https, or to an allowed network."""
    return scheme == "https" or _allowed(address, allowed)


def _kind(address: Address) -> str | None:
    """The non-public range ``address`` is in (``"a loopback"``), or ``None`` when it is public."""
    ranges = (
        ("an unspecified", address.is_unspecified),
        ("a loopback", address.is_loopback),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        *((name, address in network) for network, name in NAMED),
        ("a reserved", address.is_reserved or not address.is_global),
    )
    return next((kind for kind, inside in ranges if inside), None)
