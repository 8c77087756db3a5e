"""Whether a local address can be listened on, checked before a command starts serving."""

from __future__ import annotations

import socket


def port_free(host: str, port: int) -> bool:
    """True if ``host:port`` can be bound now (port 0 always can)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
