"""The rule against cross-site writes (pure, no I/O).

A page on another site can make a visitor's browser send a "simple" request: a POST whose
body is a form or ``text/plain`` (or a body with no type at all), without asking the server
first. Every ridecast body is JSON, and a browser sends ``Content-Type: application/json``
across sites only after a CORS preflight, which ridecast never grants. So a state-changing
request (POST, PUT, PATCH, DELETE) is refused:

- 403 ``cross_origin_refused`` when it carries an ``Origin`` that is neither the server's
  own (the scheme and ``Host`` the request came with) nor in ``RIDECAST_ALLOWED_ORIGINS``;
- 415 ``unsupported_media_type`` when it has a body whose type is not JSON
  (``application/json`` or ``application/<x>+json``, parameters allowed).

Clients that are not browsers (the CLI, the SDK, curl with ``--json``) send no ``Origin``
and label their bodies as JSON, so nothing changes for them.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import Forbidden, RidecastError, UnsupportedMediaType

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_json_type(value: bytes) -> bool:
    """True when a ``Content-Type`` value names JSON: ``application/json`` or
    ``application/<x>+json``, any parameters after ``;``."""
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/")
                                            and media.endswith(b"+json"))


def refusal(method: str, scheme: str, headers: Iterable[tuple[bytes, bytes]],
            allowed: frozenset[str]) -> RidecastError | None:
    """Why the request must be refused, or None (see the module docstring).

    ``scheme`` is the request's (``http``/``https``, as the ASGI scope says after any
    trusted proxy); ``allowed`` the origins of ``RIDECAST_ALLOWED_ORIGINS``, normalised by
    ``normalise_origin``.
    """
    if method not in STATE_CHANGING:
        return None
    origin = host = content_type = None
    has_body = False
    for name, value in headers:
        if name == b"origin":
            origin = value
        elif name == b"host":
            host = value
        elif name == b"content-type":
            content_type = value
        elif name == b"content-length":
            has_body = has_body or value.strip() not in (b"0", b"")
        elif name == b"transfer-encoding":
            has_body = True
    if origin is not None:
        given = normalise_origin(origin.decode("latin-1"))
        own = (normalise_origin(f"{scheme}://{host.decode('latin-1')}") if host is not None
               else None)
        if given != own and given not in allowed:
            return Forbidden(
                f"a {method} from the web origin {origin.decode('latin-1')[:200]!r} is refused: "
                "only the server's own pages and RIDECAST_ALLOWED_ORIGINS may change state")
    if content_type is not None and not is_json_type(content_type):
        return UnsupportedMediaType(
            f"the body is {content_type.decode('latin-1')[:100]!r}; send JSON with "
            "'Content-Type: application/json' (curl: --json, or -H "
            "'Content-Type: application/json')")
    if content_type is None and has_body:
        return UnsupportedMediaType(
            "the body has no Content-Type; send JSON with 'Content-Type: application/json' "
            "(curl: --json, or -H 'Content-Type: application/json')")
    return None


def normalise_origin(origin: str) -> str:
    """``origin`` as compared: lower case, no trailing slash, no default port."""
    origin = origin.strip().rstrip("/").lower()
    for scheme, port in (("http://", ":80"), ("https://", ":443")):
        if origin.startswith(scheme) and origin.endswith(port):
            origin = origin[:-len(port)]
    return origin


__all__ = ["STATE_CHANGING", "is_json_type", "normalise_origin", "refusal"]
