"""Outbound safety rules (pure): blocked ranges, embedded IPv4 forms, schemes."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.webhooks.targets import (
    TargetRefused,
    check_addresses,
    embedded_ipv4,
    parse_target,
    refusal,
)

ALWAYS = [
    "169.254.169.254", "169.254.1.1", "fe80::1", "fd00:ec2::254", "100.100.100.200",
    "0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1",
    "ff02::1", "::", "192.0.2.1", "2001:db8::1",
    "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1",
    # Teredo: client address is the bitwise inverse of the last 32 bits (169.254.169.254).
    "2001:0:4136:e378:8000:63bf:5601:5601",
]
PRIVATE = ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "::1",
           "fd12::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:0a00:0001::1"]
PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", ALWAYS)
def test_always_blocked(address: str) -> None:
    """Link-local, metadata, reserved, multicast and their IPv6 embeddings are always refused."""
    ip = ipaddress.ip_address(address)
    assert refusal(ip, allow_private=True) is not None
    assert refusal(ip, allow_private=False) is not None


@pytest.mark.parametrize("address", PRIVATE)
def test_private_only_when_allowed(address: str) -> None:
    """Loopback and private ranges pass only with allow_private."""
    ip = ipaddress.ip_address(address)
    assert refusal(ip, allow_private=True) is None
    assert "ALLOW_PRIVATE" in (refusal(ip, allow_private=False) or "")


@pytest.mark.parametrize("address", PUBLIC)
def test_public_allowed(address: str) -> None:
    """Public addresses are callable."""
    assert refusal(ipaddress.ip_address(address), allow_private=False) is None


@given(st.integers(min_value=0, max_value=2**32 - 1), st.booleans())
def test_embedded_forms_judged_like_their_ipv4(value: int, allow: bool) -> None:
    """IPv4-mapped and NAT64 forms get the verdict of the IPv4 address they carry."""
    v4 = ipaddress.IPv4Address(value)
    mapped = ipaddress.IPv6Address(0xFFFF << 32 | value)
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | value)
    assert embedded_ipv4(mapped) == v4 and embedded_ipv4(nat64) == v4
    expected = refusal(v4, allow_private=allow) is None
    assert (refusal(mapped, allow_private=allow) is None) == expected
    assert (refusal(nat64, allow_private=allow) is None) == expected


def test_any_bad_address_refuses_the_host() -> None:
    """A host with one public and one metadata address is refused."""
    addresses = [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("169.254.169.254")]
    with pytest.raises(TargetRefused, match="metadata"):
        check_addresses("evil.example", addresses, allow_private=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "gopher://x",
                                 "http://", "http://host:99999/"])
def test_bad_urls_refused(url: str) -> None:
    """Only http(s) URLs with a host and a valid port are accepted."""
    with pytest.raises(TargetRefused):
        parse_target(url)


def test_parse_target_parts() -> None:
    """Host, port, path+query and Host header are split out; IP literals are recognised."""
    t = parse_target("https://Example.com:8443/a/b?c=1#frag")
    assert (t.scheme, t.host, t.port, t.target) == ("https", "example.com", 8443, "/a/b?c=1")
    assert t.host_header == "example.com:8443" and t.literal is None
    v6 = parse_target("http://[::1]/")
    assert v6.literal == ipaddress.ip_address("::1") and v6.host_header == "[::1]"
