"""The SDK's exception tree follows the server's error table."""

from __future__ import annotations

import pytest

from ridecast.client import errors as e
from ridecast.errors import ERRORS


@pytest.mark.parametrize("code", sorted(c for c, s in ERRORS.items() if s.http_status))
def test_every_table_code_maps_to_its_status_class(code: str) -> None:
    """Each error code with an HTTP status becomes the APIError subclass of that status."""
    status = ERRORS[code].http_status
    assert status is not None
    error = e.api_error(status, {"error": {"code": code, "message": "m", "details": [{"x": 1}]}})
    expected = {400: e.BadRequestError, 401: e.AuthenticationError, 403: e.PermissionDeniedError,
                404: e.NotFoundError, 409: e.ConflictError, 410: e.GoneError,
                412: e.PreconditionFailedError, 413: e.PayloadTooLargeError}
    if status >= 500:
        assert isinstance(error, e.ServerError)
    else:
        assert type(error) is expected.get(status, e.APIError)
    assert (error.code, error.message, error.details, error.status) == (code, "m", [{"x": 1}],
                                                                        status)
    assert error.description == ERRORS[code].description


def test_non_json_error_body() -> None:
    """A body without the error envelope (a proxy's page) still gives a useful error."""
    error = e.api_error(502, "<html>bad gateway</html>")
    assert isinstance(error, e.ServerError)
    assert error.code == "internal_error" and "bad gateway" in error.message


@pytest.mark.parametrize(
    ("close", "cls", "code"),
    [(4001, e.StreamAuthError, "not_authenticated"), (4004, e.StreamAuthError, "token_expired"),
     (4005, e.StreamNotFound, "unknown_event_type"),
     (4006, e.StreamNotFound, "simulation_not_found"), (4010, e.CursorExpired, "cursor_expired"),
     (4008, e.StreamClosed, "invalid_cursor")],
)
def test_stream_errors(close: int, cls: type[e.StreamClosed], code: str) -> None:
    """A do-not-reconnect close code becomes a typed StreamClosed with the table's code."""
    error = e.stream_error(close, "why")
    assert type(error) is cls
    assert (error.close_code, error.code, error.reason) == (close, code, "why")
    assert isinstance(error, e.ClientError)
