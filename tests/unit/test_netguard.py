"""The outbound check over every address form, without DNS (a literal host resolves to itself): an IPv6
address that carries an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4) is judged by that address,
the local-use NAT64 prefix and Teredo are refused, and the allowed networks let through what they contain."""

from __future__ import annotations

import ipaddress

import pytest

from parkway.netguard import UnsafeUrl, check_url


def url(host: str) -> str:
    return f"http://[{host}]:8080/hook" if ":" in host else f"http://{host}:8080/hook"


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("64:ff9b::a9fe:a9fe", "the NAT64 form of 169.254.169.254, a link-local address"),
        ("64:ff9b::7f00:1", "the NAT64 form of 127.0.0.1, a loopback address"),
        ("2002:a9fe:a9fe::1", "the 6to4 form of 169.254.169.254, a link-local address"),
        ("2002:0a00:0001::1", "the 6to4 form of 10.0.0.1, a private address"),
        ("::ffff:127.0.0.1", "the IPv4-mapped form of 127.0.0.1, a loopback address"),
        ("::127.0.0.1", "the IPv4-compatible form of 127.0.0.1, a loopback address"),
        ("::10.1.2.3", "the IPv4-compatible form of 10.1.2.3, a private address"),
        ("64:ff9b:1::1", "a local-use NAT64 address"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo address"),
        ("fc00::1", "a unique-local address"),
        ("fe80::1", "a link-local address"),
        ("ff02::1", "a multicast address"),
        ("ff0e::1", "a multicast address"),
        ("::", "an unspecified address"),
        ("::1", "a loopback address"),
        ("239.1.2.3", "a multicast address"),
        ("100.64.0.1", "a shared address"),
        ("240.0.0.1", "a reserved address"),
    ],
)
def test_check_url__refuses_every_form_of_a_non_public_address_with_the_reason(host: str, why: str) -> None:
    with pytest.raises(UnsafeUrl) as refused:
        check_url(url(host), [])
    assert f"resolves to {ipaddress.ip_address(host)}, {why}" in str(refused.value)


@pytest.mark.parametrize("host", ["64:ff9b::808:808", "2002:0808:0808::1", "::ffff:8.8.8.8", "8.8.8.8"])
def test_check_url__a_public_ipv4_address_in_any_form_is_reached(host: str) -> None:
    assert check_url(url(host), []) == [ipaddress.ip_address(host)]


def test_check_url__an_allowed_network_lets_through_what_it_contains() -> None:
    ten, nat64 = ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("64:ff9b::/96")
    # An IPv4-mapped address is its IPv4 address: the connection goes there
    assert check_url(url("10.1.2.3"), [ten]) and check_url(url("::ffff:10.1.2.3"), [ten])
    # A translated one reaches its IPv4 address elsewhere, through a translator: only its IPv6 network allows it
    with pytest.raises(UnsafeUrl, match=r"the NAT64 form of 10\.1\.2\.3, a private address"):
        check_url(url("64:ff9b::a01:203"), [ten])
    assert check_url(url("64:ff9b::a01:203"), [nat64])
    local_use = ipaddress.ip_network("64:ff9b:1::/48")
    assert check_url(url("64:ff9b:1::1"), [local_use])
