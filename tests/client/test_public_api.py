"""The SDK's public surface is deliberate, and the SDK stays client-side."""

from __future__ import annotations

import subprocess
import sys

import ridecast.client

EXPECTED = {
    "APIError", "Action", "AsyncClient", "AuthenticationError", "Backoff", "BadRequestError",
    "Client", "ClientError", "ConflictError", "CursorExpired", "EventPage", "EventStream",
    "Frame", "GoneError", "NotFoundError", "PayloadTooLargeError", "PermissionDeniedError",
    "PreconditionFailedError", "ServerError", "Simulation", "StreamAuthError", "StreamClosed",
    "StreamNotFound", "StreamStatus", "TransportError", "WebhookVerificationError",
    "classify_close", "parse_webhook", "verify_webhook",
}


def test_all_is_the_documented_surface() -> None:
    """__all__ lists exactly the public names, and each exists."""
    assert set(ridecast.client.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(ridecast.client, name) is not None


def test_every_exception_derives_from_client_error() -> None:
    """One exception tree: every exported exception is a ClientError."""
    for name in EXPECTED:
        obj = getattr(ridecast.client, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, ridecast.client.ClientError), name


def test_importing_the_sdk_loads_no_server_module() -> None:
    """`import ridecast.client` pulls in no server part (store, api, hub, bus, simulator)."""
    code = (
        "import sys, ridecast.client\n"
        "bad = [m for m in sys.modules if m.split('.')[:2] and m.startswith('ridecast.') and "
        "m.split('.')[1] in ('store','api','hub','bus','simulator','runtime','app','ingest',"
        "'simulations','auth','cli','dashboard')]\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
