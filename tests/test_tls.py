"""``ridecast serve --tls-cert --tls-key`` serves https (and so wss), as the interface says."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import launch_server


def test_https_with_a_certificate(tmp_path: Path) -> None:
    """With a certificate the API answers over TLS, verified against that certificate."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
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
