"""Signing is the Standard Webhooks scheme: the stock verifier accepts what we sign."""

from __future__ import annotations

import base64
import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook, WebhookVerificationError

from ridecast.events.signing import SignatureError, sign_headers, verify

secrets = st.binary(min_size=16, max_size=64).map(
    lambda raw: "whsec_" + base64.b64encode(raw).decode()
)
msg_ids = st.from_regex(r"msg_[0-9]{1,12}", fullmatch=True)
# The stock verifier parses the body as JSON, so feed it JSON (any bytes for our own verify).
json_bodies = st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=20),
                              max_size=5).map(lambda d: json.dumps(d).encode())


@given(secret=secrets, msg_id=msg_ids, body=json_bodies)
def test_stock_verifier_accepts_our_signature(secret: str, msg_id: str, body: bytes) -> None:
    """standardwebhooks.Webhook verifies every header set sign_headers produces."""
    now = int(time.time())
    headers = sign_headers(secret, msg_id, now, body)
    Webhook(secret).verify(body, headers)  # raises on mismatch
    verify(secret, headers, body)


@given(secret=secrets, body=json_bodies)
def test_tampered_body_is_refused_by_both(secret: str, body: bytes) -> None:
    """A changed body fails our verify and the stock one."""
    headers = sign_headers(secret, "msg_1", int(time.time()), body)
    tampered = body + b" "
    with pytest.raises(SignatureError):
        verify(secret, headers, tampered)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(tampered, headers)


def test_stale_timestamp_is_refused() -> None:
    """A timestamp outside the tolerance is a replay and is refused."""
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
    headers = sign_headers(secret, "msg_1", int(time.time()) - 3600, b"{}")
    with pytest.raises(SignatureError):
        verify(secret, headers, b"{}")


def test_rotation_any_signature_matches() -> None:
    """Several space-separated signatures verify when one of them matches (secret rotation)."""
    old = "whsec_" + base64.b64encode(b"o" * 24).decode()
    new = "whsec_" + base64.b64encode(b"n" * 24).decode()
    now = int(time.time())
    both = sign_headers(old, "msg_9", now, b"{}")
    both["webhook-signature"] += " " + sign_headers(new, "msg_9", now, b"{}")["webhook-signature"]
    verify(new, both, b"{}")
    verify(old, both, b"{}")


def test_no_secret_no_signature() -> None:
    """Without a secret only webhook-id and webhook-timestamp are set."""
    assert sign_headers(None, "msg_3", 17, b"{}") == {
        "webhook-id": "msg_3", "webhook-timestamp": "17"
    }
