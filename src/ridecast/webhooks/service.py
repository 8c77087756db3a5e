"""The webhook part of a running process: target checks, the dispatcher, the log, the test send.

``app.py`` builds its collaborators and it (it builds nothing itself), and registers
``check_data`` as a check of every simulation ``data`` write; the API routes of the delivery
log call it. The dispatcher runs only when asked (the serve process with
``RIDECAST_WEBHOOK_WORKERS`` on, or ``ridecast worker``); the log, replay and
``webhook_test`` work in every process.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from ..errors import BadRequest, Conflict, NotFound
from ..events.webhook_settings import SECRET_KEY, URL_KEY, webhook_settings
from .deliverylog import DeliveryLog, DeliveryPage
from .dispatcher import Dispatcher
from .resolver import Resolver
from .sender import Attempt, Sender
from .targets import InvalidTarget, TargetRefused, parse_target

TEST_MESSAGE_TYPE = "webhook_test"


class WebhookService:
    """Webhook delivery for one process; see the module docstring."""

    def __init__(self, *, resolver: Resolver, sender: Sender, deliveries: DeliveryLog,
                 dispatcher: Dispatcher | None, max_page_bytes: int) -> None:
        self._max_page_bytes = max_page_bytes
        self.resolver = resolver
        self.sender = sender
        self.deliveries = deliveries
        self.dispatcher = dispatcher

    def start(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.start()

    async def close(self) -> None:
        if self.dispatcher is not None:
            await self.dispatcher.close()
        await self.sender.close()

    async def check_data(self, data: dict[str, Any]) -> None:
        """The check of every ``data`` a user sets, with the code that will send it: a URL
        the sender cannot write as a request, or a secret it cannot sign with, is a 400
        ``invalid_simulation_data`` naming the field; a URL that may not be called (its
        addresses) is a 400 ``webhook_target_refused``."""
        url = data.get(URL_KEY)
        if isinstance(url, str):
            try:
                parse_target(url)
            except InvalidTarget as exc:
                raise BadRequest(str(exc), code="invalid_simulation_data",
                                 details=[{"field": f"data.{URL_KEY}", "value": url}]) from None
            except TargetRefused:
                pass  # the scheme: refused by the data's validation, with its own message
            try:
                await self.resolver.check_url(url)
            except TargetRefused as exc:
                raise BadRequest(
                    str(exc),
                    code="webhook_target_refused",
                    details=[{"field": f"data.{URL_KEY}", "value": url}],
                ) from None
        secret = data.get(SECRET_KEY)
        if isinstance(secret, str):
            try:
                self.sender.signing_key(secret)
            except ValueError:
                raise BadRequest(
                    f"{SECRET_KEY} must be 'whsec_' followed by base64 (Standard Webhooks "
                    "format): it cannot sign a delivery",
                    code="invalid_simulation_data",
                    details=[{"field": f"data.{SECRET_KEY}", "value": "<redacted>"}],
                ) from None

    def wake(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.wake()

    # ---- the delivery log ----------------------------------------------------------------

    async def backlog(self, simulation_id: int) -> tuple[int, float | None]:
        """The simulation's deliveries still to send, and the age in seconds of the oldest
        of their events (None when there is none)."""
        rows = await self.deliveries.backlog(simulation_id)
        if not rows:
            return 0, None
        _sim, count, oldest = rows[0]
        return count, round(max(0.0, time.time() - oldest), 3)

    async def list(
        self, simulation_id: int, *, status: str | None, message_type: str | None,
        limit: int, offset: int, after: int | None = None,
    ) -> tuple[list[dict[str, Any]], DeliveryPage, bool]:
        """A page of the delivery log as the API shows it: its deliveries (newest first,
        those listed after delivery ``after``), the page read (its total, and whether that
        total is exact), and whether the byte budget (``RIDECAST_MAX_PAGE_BYTES``) cut it.
        The page stops before the delivery that would take it past the budget; one larger
        than the budget comes alone."""
        page = await self.deliveries.page(
            simulation_id, status=status, message_type=message_type, limit=limit,
            offset=offset, before=after, max_chars=self._max_page_bytes)
        objects: list[dict[str, Any]] = []
        used = 0
        for row in page.rows:
            item = delivery_json(row)
            used += len(orjson.dumps(item)) + 1
            if objects and used > self._max_page_bytes:
                return objects, page, True  # characters sized it; bytes cut it
            objects.append(item)
        return objects, page, page.truncated

    async def retry(self, simulation_id: int, delivery_id: int) -> dict[str, Any]:
        done = await self.deliveries.retry(simulation_id, delivery_id)
        if done is None:
            raise NotFound(
                f"no webhook delivery {delivery_id} in simulation {simulation_id}",
                code="delivery_not_found",
            )
        if done is False:
            raise Conflict(
                f"webhook delivery {delivery_id} is being sent right now; retry it later",
                code="invalid_state",
            )
        self.wake()  # ``done`` is the delivery as the replay queued it
        return delivery_json(done)

    async def retry_failed(self, simulation_id: int) -> int:
        count = await self.deliveries.retry_failed(simulation_id)
        self.wake()
        return count

    async def send_test(self, simulation_id: int, data: dict[str, Any]) -> dict[str, Any]:
        """Send a ``webhook_test`` envelope to the simulation's URL now; the attempt's outcome."""
        hook = webhook_settings(data)
        url = data.get(URL_KEY)
        if not isinstance(url, str):
            raise Conflict(
                f"simulation {simulation_id} has no {URL_KEY} to test", code="invalid_state"
            )
        now = datetime.now(UTC).isoformat()
        body = orjson.dumps(
            {
                "simulation_id": simulation_id,
                "agent_type": "event_publisher",
                "message_type": TEST_MESSAGE_TYPE,
                "data": {"message": "ridecast webhook test"},
                "current_sim_ts": now,
                "server_ts": now,
                "transmit_to_websocket": False,
            }
        )
        msg_id = f"msg_test_{uuid.uuid4().hex}"
        secret = hook.secret if hook else data.get("messaging_webhook_secret")
        attempt = await self.sender.send(
            url, msg_id, body, secret if isinstance(secret, str) else None
        )
        return {"url": url, "webhook_id": msg_id, **attempt_json_from(attempt)}


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat() if ts is not None else None


def attempt_json_from(attempt: Attempt) -> dict[str, Any]:
    return {
        "ok": attempt.ok,
        "started_at": _iso(attempt.started_at),
        "latency_ms": round(attempt.latency_ms, 3),
        "status_code": attempt.status_code,
        "error_class": attempt.error_class.value if attempt.error_class else None,
        "error": attempt.error,
        "response_body": attempt.response_body,
    }


def delivery_json(row: dict[str, Any]) -> dict[str, Any]:
    """A delivery as the API shows it, with its attempts oldest first."""
    return {
        "id": row["id"],
        "webhook_id": f"msg_{row['event_id']}",
        "event_id": str(row["event_id"]),
        "simulation_id": row["simulation_id"],
        "message_type": row["message_type"],
        "url": row["url"],
        "status": row["status"],
        "attempt_count": row["attempt_count"],
        "next_attempt_at": _iso(row["next_attempt_at"]) if row["status"] == "pending" else None,
        "last_error": row["last_error"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
        "attempts": [
            {
                "started_at": _iso(a["started_at"]),
                "latency_ms": a["latency_ms"],
                "status_code": a["status_code"],
                "error_class": a["error_class"],
                "error": a["error"],
                "response_body": a["response_body"],
            }
            for a in row["attempts"]
        ],
    }


__all__ = ["WebhookService", "delivery_json"]

