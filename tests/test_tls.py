"""``ridecast serve --tls-cert --tls-key`` serves https (and so wss), as the interface says."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import launch_server


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def test_https_with_a_certificate(tmp_path: Path) -> None:
    """With a certificate the API answers over TLS, verified against that certificate."""
    cert, key = _certificate(tmp_path)
    server = launch_server(tmp_path, args=["--tls-cert", str(cert), "--tls-key", str(key)],
                           scheme="https")
    try:
        user = server.create_user()
        context = ssl.create_default_context(cafile=str(cert))
        response = httpx.get(f"https://127.0.0.1:{server.port}/api/v2/user/token/",
                             auth=user.auth, verify=context)
        assert response.status_code == 200
        assert list(response.json()) == ["token"]
        with pytest.raises(httpx.HTTPError):
            # plain http to the TLS port is not served
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2).raise_for_status()
    finally:
        server.stop()


def test_wss_on_both_ports(tmp_path: Path) -> None:
    """With a certificate, the HTTP port and the dedicated websocket port both speak wss."""
    import asyncio

    import orjson
    from websockets.asyncio.client import connect

    from ridecast.events.examples import example_event
    from tests.conftest import free_port

    cert, key = _certificate(tmp_path)
    ws_port = free_port()
    server = launch_server(tmp_path, {"RIDECAST_WS_PORT": str(ws_port)},
                           args=["--tls-cert", str(cert), "--tls-key", str(key)], scheme="https")
    context = ssl.create_default_context(cafile=str(cert))
    try:
        user = server.create_user()
        with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", auth=user.auth,
                          verify=context) as http:
            token = http.get("/api/v2/user/token/").json()["token"]
            sim = http.post("/api/v2/simulation", json={"name": "tls"}).json()["id"]

            async def receive(port: int) -> dict[str, object]:
                url = f"wss://127.0.0.1:{port}/simulation_events/{sim}?token={token}"
                async with connect(url, ssl=context) as ws:
                    await asyncio.to_thread(
                        http.post, f"/api/v2/simulation/{sim}/events",
                        json=example_event("vehicle_use", sim),
                    )
                    frame: dict[str, object] = orjson.loads(await asyncio.wait_for(ws.recv(),
                                                                                   10))
                    return frame

            for port in (server.port, ws_port):
                assert asyncio.run(receive(port))["message_type"] == "vehicle_use"
    finally:
        server.stop()


def test_a_tls_handshake_that_never_starts_is_dropped_as_idle(tmp_path: Path) -> None:
    """A connection that never sends its ClientHello is closed by the server after
    RIDECAST_HTTP_IDLE_TIMEOUT_S, on both ports, not after asyncio's minute: the socket
    below waits far less than that minute for the server to close it."""
    import socket

    from tests.conftest import free_port

    cert, key = _certificate(tmp_path)
    ws_port = free_port()
    server = launch_server(tmp_path, {"RIDECAST_WS_PORT": str(ws_port),
                                      "RIDECAST_HTTP_IDLE_TIMEOUT_S": "1"},
                           args=["--tls-cert", str(cert), "--tls-key", str(key)], scheme="https")
    try:
        for port in (server.port, ws_port):
            with socket.create_connection(("127.0.0.1", port)) as silent:
                silent.settimeout(20)  # a third of asyncio's default handshake timeout
                try:
                    closed = silent.recv(1) == b""
                except ConnectionResetError:
                    closed = True
                assert closed, port
    finally:
        server.stop()
