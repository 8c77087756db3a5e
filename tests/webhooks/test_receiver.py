"""``ridecast receiver``: logs each request (pretty or JSON lines) and can fail at random."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from tests.conftest import free_port
from tests.waiting import eventually


def _start(*args: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ridecast.cli.main", "receiver", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        eventually(lambda: httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1), timeout=15,
                   step=0.1, ignoring=(httpx.TransportError,), what="the receiver started")
    except AssertionError:
        proc.kill()
        raise
    return proc, port


def test_json_lines_log_method_url_headers_body() -> None:
    """--json prints one JSON object per request with method, URL, headers and body."""
    proc, port = _start("--json")
    try:
        answer = httpx.post(f"http://127.0.0.1:{port}/hook?a=1", json={"x": 1},
                            headers={"webhook-id": "msg_1"})
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert answer.status_code == 204
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    hook = next(line for line in lines if line["url"] == "/hook?a=1")
    assert hook["method"] == "POST" and hook["body"] == {"x": 1}
    assert hook["headers"]["webhook-id"] == "msg_1"


def test_pretty_blocks_and_fail_rate() -> None:
    """The pretty mode prints a block per request; --fail-rate 1 answers 500 every time."""
    proc, port = _start("--fail-rate", "1")
    try:
        answer = httpx.post(f"http://127.0.0.1:{port}/x", content=b"plain text")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert answer.status_code == 500
    assert "POST /x" in out and "plain text" in out and "answered 500" in out
