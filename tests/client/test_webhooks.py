"""verify_webhook agrees with the stock Standard Webhooks library."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from ridecast.client import WebhookVerificationError, parse_webhook, verify_webhook

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
BODY = (b'{"simulation_id":1,"agent_type":"vehicle","message_type":"vehicle_use",'
        b'"data":{"vehicle_id":7,"action":"disabled"},'
        b'"current_sim_ts":"2026-11-22T03:00:00+00:00",'
        b'"server_ts":"2026-11-22T03:00:00+00:00","transmit_to_websocket":true}')


def stock_headers(msg_id: str = "msg_1", at: float | None = None) -> dict[str, str]:
    stamp = datetime.fromtimestamp(at if at is not None else time.time(), UTC)
    signature = Webhook(SECRET).sign(msg_id, stamp, BODY.decode())
    return {"Webhook-Id": msg_id, "Webhook-Timestamp": str(int(stamp.timestamp())),
            "Webhook-Signature": signature}


def test_accepts_what_the_stock_library_signs() -> None:
    """A request signed by `standardwebhooks` verifies, whatever the header case."""
    verify_webhook(SECRET, stock_headers(), BODY)
    event = parse_webhook(SECRET, stock_headers(), BODY.decode())
    assert event.message_type == "vehicle_use"


def test_stock_library_agrees_on_our_verdicts() -> None:
    """The stock verifier accepts the same headers ours accepts."""
    headers = stock_headers()
    Webhook(SECRET).verify(BODY, headers)
    verify_webhook(SECRET, headers, BODY)


@pytest.mark.parametrize(
    "tamper",
    [lambda h, b: (h, b.replace(b"disabled", b"enabled")),
     lambda h, b: ({**h, "Webhook-Id": "msg_2"}, b),
     lambda h, b: ({k: v for k, v in h.items() if k != "Webhook-Signature"}, b),
     lambda h, b: ({**h, "Webhook-Signature": "v1,AAAA"}, b)],
)
def test_refuses_tampering(tamper: object) -> None:
    """A changed body or id, or a missing or wrong signature, is refused."""
    headers, body = tamper(stock_headers(), BODY)  # type: ignore[operator]
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, headers, body)


def test_refuses_stale_timestamps() -> None:
    """A request signed ten minutes ago is refused (replay protection)."""
    with pytest.raises(WebhookVerificationError, match="tolerance"):
        verify_webhook(SECRET, stock_headers(at=time.time() - 600), BODY)
    verify_webhook(SECRET, stock_headers(at=time.time() - 600), BODY, tolerance_s=900)


def test_accepts_one_valid_signature_among_several() -> None:
    """During a secret rotation, one matching signature out of several is enough."""
    headers = stock_headers()
    headers["Webhook-Signature"] = "v1,bm90LWl0 " + headers["Webhook-Signature"]
    verify_webhook(SECRET, headers, BODY)


def test_bad_secret_is_a_verification_error() -> None:
    """A secret that is not whsec_ + base64 raises the SDK's error, not a ValueError."""
    with pytest.raises(WebhookVerificationError):
        verify_webhook("whsec_!!!", stock_headers(), BODY)
