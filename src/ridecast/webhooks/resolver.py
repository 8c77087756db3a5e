"""DNS resolution of webhook hosts, checked against the target rules before any connection.

``Resolver.resolve`` returns the addresses a host may be called at, or raises: the sender
then connects to one of those very addresses (no second lookup, so a DNS answer that changes
between check and connect, "DNS rebinding", cannot reach a refused address). Answers are
cached for a short time so that a busy endpoint costs one lookup per TTL, not one per event.
"""

from __future__ import annotations

import asyncio
import socket
import time

from .targets import IPAddress, Target, check_addresses, parse_target

CACHE_TTL_S = 30.0
CACHE_MAX = 4096


class ResolveError(OSError):
    """Raised when the host name does not resolve (the attempt's error class is ``dns``)."""


class Resolver:
    """Looks host names up with the event loop's ``getaddrinfo``, with a small TTL cache."""

    def __init__(self, *, allow_private: bool, ttl_s: float = CACHE_TTL_S) -> None:
        self.allow_private = allow_private
        self._ttl = ttl_s
        self._cache: dict[str, tuple[float, list[IPAddress]]] = {}
        # URL -> checked (target, address, the address as text): a busy endpoint is parsed
        # and judged once per TTL.
        self._checked: dict[str, tuple[float, Target, IPAddress, str]] = {}

    async def lookup(self, host: str, port: int) -> list[IPAddress]:
        """Every address of ``host`` (unchecked); ``ResolveError`` when there is none."""
        import ipaddress

        now = time.monotonic()
        cached = self._cache.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise ResolveError(f"cannot resolve {host}: {exc}") from exc
        addresses: list[IPAddress] = []
        for _family, _type, _proto, _canon, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in addresses:
                addresses.append(address)
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        self._cache[host] = (now + self._ttl, addresses)
        return addresses

    def checked(self, url: str) -> tuple[Target, str] | None:
        """The parsed target and checked address (as text) of ``url`` if the cache holds
        them and they are fresh; None means ``resolve`` must be awaited."""
        hit = self._checked.get(url)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1], hit[3]
        return None

    async def resolve(self, url: str) -> tuple[Target, IPAddress]:
        """The parsed target and the checked address to connect to.

        Raises ``TargetRefused`` (bad scheme, or any address in a blocked range) or
        ``ResolveError``.
        """
        now = time.monotonic()
        hit = self._checked.get(url)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        target = parse_target(url)
        if target.literal is not None:
            addresses: list[IPAddress] = [target.literal]
        else:
            addresses = await self.lookup(target.host, target.port)
        checked = check_addresses(target.host, addresses, allow_private=self.allow_private)
        if len(self._checked) >= CACHE_MAX:
            self._checked.clear()
        self._checked[url] = (now + self._ttl, target, checked[0], str(checked[0]))
        return target, checked[0]

    async def check_url(self, url: str, *, timeout_s: float = 2.0) -> None:
        """``TargetRefused`` when ``url`` may not be called.

        A host that does not resolve (yet) is accepted here: it is checked again, and
        recorded as a ``dns`` failure, at send time; refusing it would make a PATCH depend
        on the DNS of the moment.
        """
        try:
            async with asyncio.timeout(timeout_s):
                await self.resolve(url)
        except (ResolveError, TimeoutError):
            return


__all__ = ["ResolveError", "Resolver"]
