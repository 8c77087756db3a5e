"""Connection options shared by the client-side commands, and their error handling.

Every command that talks to a running server takes ``--url`` (``$RIDECAST_URL``, default
http://127.0.0.1:8000), ``--user`` (``$RIDECAST_USER``) and ``--key`` (``$RIDECAST_API_KEY``);
SDK errors become one red line on stderr and exit status 1 (2 for bad credentials), never a
traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .output import console

if TYPE_CHECKING:
    from ..client import Client

# The SDK's (client/models.py; a test keeps them equal): here so that the options are built,
# and every command's --help printed, without importing the SDK and its models.
DEFAULT_URL = "http://127.0.0.1:8000"
ENV_URL = "RIDECAST_URL"
ENV_USER = "RIDECAST_USER"
ENV_KEY = "RIDECAST_API_KEY"

T = TypeVar("T")

err = console(stderr=True)
out = console()

UrlOption = Annotated[str, typer.Option(
    "--url", "--server", envvar=ENV_URL, show_envvar=True,
    help="Base URL of the ridecast server; the nodes of a cluster comma-separated "
    "(the client fails over between them).")]
# For commands whose --url names something else (webhook set: the receiver).
ServerOption = Annotated[str, typer.Option(
    "--server", envvar=ENV_URL, show_envvar=True, help="Base URL of the ridecast server.")]
UserOption = Annotated[str | None, typer.Option(
    "--user", envvar=ENV_USER, show_envvar=True,
    help="User name (HTTP Basic); without it the key is sent as 'Authorization: Token'.")]
KeyOption = Annotated[str | None, typer.Option(
    "--key", envvar=ENV_KEY, show_envvar=True, show_default=False, help="API key.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

DEFAULT = DEFAULT_URL


def make_client(url: str, user: str | None, key: str | None) -> Client:
    """A blocking SDK client for these options."""
    from ..client import Client

    return Client(url, user=user, key=key)


def url_mistake(url: str) -> str | None:
    """What is wrong with a ``--url`` before any request is sent (pure), or None: a base URL
    without its scheme, or one that names the API's prefix rather than the server."""
    for part in (p.strip() for p in url.split(",") if p.strip()):
        if "://" not in part:
            return (f"--url {part} has no scheme: did you mean http://{part} "
                    "(or https:// for a server with TLS)?")
        if part.rstrip("/").endswith("/api/v2"):
            base = part.rstrip("/").removesuffix("/api/v2")
            return (f"--url {part} names the API's prefix: give the server's base URL "
                    f"({base}); the commands add /api/v2 themselves")
    return None


def print_json(value: Any) -> None:
    """One JSON document on stdout (no colour, no wrapping: scripts parse it)."""
    typer.echo(json.dumps(value, separators=(",", ":"), default=str))


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", soft_wrap=True)  # one line, whatever the width
    return typer.Exit(code)


@contextmanager
def reporting_errors(url: str | None = None) -> Iterator[None]:
    """Turn SDK errors into one line on stderr and a non-zero exit status; ``url``, when
    given, is named when no server answers there."""
    from ..client import AuthenticationError, ClientError
    from ..client.errors import APIError, TransportError

    mistake = url_mistake(url) if url is not None else None
    if mistake is not None:
        raise fail(mistake)
    try:
        yield
    except TransportError as exc:
        if url is None:
            raise fail(str(exc)) from None
        raise fail(f"no ridecast server answers at {url} ({exc}); start one (ridecast serve) "
                   f"or point --url / ${ENV_URL} at it") from None
    except AuthenticationError as exc:
        raise fail(f"{exc.message} ({exc.code}); check --user/--key "
                   f"(${ENV_USER}, ${ENV_KEY})", 2) from None
    except APIError as exc:
        detail = ""
        if exc.details:
            detail = " " + json.dumps(exc.details, default=str)[:300]
        raise fail(f"{exc.message} ({exc.status} {exc.code}){detail}") from None
    except ClientError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:  # the SDK refuses bad arguments (unknown types) before sending
        raise fail(str(exc)) from None


def call(url: str, user: str | None, key: str | None, work: Callable[[Client], T]) -> T:
    """Run ``work`` with a client for these options, reporting SDK errors."""
    with reporting_errors(url), make_client(url, user, key) as client:
        return work(client)
