"""Which webhook targets ridecast may call (docs/design.md decision 9), as pure functions.

A target URL is refused when its scheme is not http(s) or when *any* address its host
resolves to is in a blocked range. Blocked always: unspecified, "this network" (0/8),
link-local (169.254/16, fe80::/10) and the cloud metadata addresses, multicast, broadcast,
reserved and documentation ranges, and the IPv6 forms that embed a blocked IPv4 address
(IPv4-mapped ``::ffff:``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``).
Loopback and private ranges (RFC 1918, CGNAT, ULA) only when ``allow_private`` is on.

The resolver (``webhooks.resolver``) does the DNS lookup; this module only judges addresses,
so the rules are tested exhaustively without a network.

``parse_target`` is also the one place that turns a URL into what goes on the wire: the host
in its IDNA (ASCII) form, the path and query percent-encoded where they hold anything but
the ASCII a request line may carry. The sender builds its request from it, and a URL is
checked with it when it is set (``WebhookService.check_data``), so a URL that was accepted
can always be sent; one that cannot is refused then, with ``InvalidTarget``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "168.63.129.16",  # Azure wire server
    )
)

# (network, reason) pairs; the first that contains the address names the refusal.
_ALWAYS_BLOCKED: tuple[tuple[_V4 | _V6, str], ...] = (
    (_V4("0.0.0.0/8"), "'this network' (0.0.0.0/8)"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("192.0.0.0/24"), "IETF protocol assignment"),
    (_V4("192.0.2.0/24"), "documentation (reserved)"),
    (_V4("198.51.100.0/24"), "documentation (reserved)"),
    (_V4("203.0.113.0/24"), "documentation (reserved)"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
    (_V6("::/128"), "unspecified"),
    (_V6("::/96"), "IPv4-compatible (deprecated, reserved)"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local (deprecated, reserved)"),
    (_V6("ff00::/8"), "multicast"),
    (_V6("100::/64"), "discard-only (reserved)"),
    (_V6("2001:db8::/32"), "documentation (reserved)"),
)

_PRIVATE: tuple[tuple[_V4 | _V6, str], ...] = (
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("100.64.0.0/10"), "shared (CGNAT)"),
    (_V4("198.18.0.0/15"), "benchmarking (private)"),
    (_V6("::1/128"), "loopback"),
    (_V6("fc00::/7"), "unique local (private)"),
)

_LOOPBACK6 = ipaddress.IPv6Address("::1")
_NAT64 = (_V6("64:ff9b::/96"), _V6("64:ff9b:1::/48"))


class TargetRefused(ValueError):
    """Raised when a webhook URL or one of its addresses may not be called."""


class InvalidTarget(TargetRefused):
    """Raised when a webhook URL cannot be written as an HTTP request at all: not a URL, a
    bad port, a host name with no IDNA form, an IPv6 literal that does not parse."""


# What a host name may hold once in its ASCII form (letters, digits, hyphens, dots; the
# underscore that some DNS names carry).
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?")
# Characters a path or a query keeps as they are; anything else is percent-encoded (and a
# "%" that starts no escape too).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _encoded(part: str, safe: str) -> str:
    """``part`` with every character a request line may not carry percent-encoded; an
    escape already there (``%20``) is kept as it is."""
    return quote(_ESCAPE.sub("%25", part), safe=safe + "%")


def _ascii_host(host: str, url: str) -> str:
    """The host name as it goes to DNS, SNI and the Host header: IDNA, lower case."""
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise InvalidTarget(f"the host of {url!r} is not a valid host name: {exc}") from None
    if not _HOST_NAME.fullmatch(ascii_host) or ".." in ascii_host:
        raise InvalidTarget(f"the host of {url!r} is not a valid host name")
    return ascii_host


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed webhook URL: where to connect and what to send as Host and SNI."""

    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent on the request line
    literal: IPAddress | None  # the host when it is an IP literal: no DNS lookup

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def parse_target(url: str) -> Target:
    """Split ``url`` into what goes on the wire; ``TargetRefused`` for a non-http(s)
    scheme or a missing host, ``InvalidTarget`` for anything that cannot be sent."""
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:  # a bad port, "http://[::1", ...
        raise InvalidTarget(f"{url!r} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise TargetRefused(f"only http:// and https:// webhook URLs are allowed, not {url!r}")
    if not host:
        raise TargetRefused(f"the webhook URL {url!r} has no host")
    literal: IPAddress | None = None
    hostport = parts.netloc.rpartition("@")[2]
    if hostport.startswith("["):
        # A bracketed literal must be an IPv6 address (with no zone: it names an interface
        # of this machine, not a webhook target), followed by a port or nothing.
        if not re.fullmatch(r"(?::[0-9]*)?", hostport.partition("]")[2]):
            raise InvalidTarget(f"{url!r} has text after its IPv6 address")
        try:
            literal = ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidTarget(f"{url!r} holds an invalid IPv6 address") from None
        if "%" in host:
            raise InvalidTarget(f"{url!r} names an interface (a zone): not a webhook target")
    else:
        try:
            literal = ipaddress.IPv4Address(host)
        except ValueError:
            host = _ascii_host(host, url)
    target = _encoded(parts.path or "/", _PATH_SAFE)
    if parts.query:
        target += "?" + _encoded(parts.query, _QUERY_SAFE)
    return Target(scheme, host, port or (443 if scheme == "https" else 80), target, literal)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4, Teredo client)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def refusal(address: IPAddress, *, allow_private: bool) -> str | None:
    """Why ``address`` may not be called, or None when it may."""
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            why = refusal(inner, allow_private=allow_private)
            return f"{address} embeds {inner}: {why}" if why else None
    for net, reason in _ALWAYS_BLOCKED:
        # ::1 sits inside the deprecated ::/96 block but is plain loopback.
        if address.version == net.version and address in net and address != _LOOPBACK6:
            return f"{address} is a {reason} address"
    for net, reason in _PRIVATE:
        if address.version == net.version and address in net:
            if allow_private:
                return None
            return (
                f"{address} is a {reason} address (allowed only with "
                "RIDECAST_WEBHOOK_ALLOW_PRIVATE=true)"
            )
    if address.is_reserved or address.is_multicast or address.is_unspecified:
        return f"{address} is a reserved address"
    return None


def check_addresses(
    host: str, addresses: list[IPAddress], *, allow_private: bool
) -> list[IPAddress]:
    """``addresses`` when every one may be called; else ``TargetRefused`` naming the first bad one.

    All of them are checked, not just the one that will be used: a host that resolves to a
    public and a metadata address is refused, since a later lookup could pick either.
    """
    if not addresses:
        raise TargetRefused(f"{host} resolves to no address")
    for address in addresses:
        why = refusal(address, allow_private=allow_private)
        if why:
            raise TargetRefused(f"webhook host {host} refused: {why}")
    return addresses


__all__ = [
    "METADATA_ADDRESSES",
    "InvalidTarget",
    "Target",
    "TargetRefused",
    "check_addresses",
    "embedded_ipv4",
    "parse_target",
    "refusal",
]
