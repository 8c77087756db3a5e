"""Routes of the webhook delivery log: list, replay one, replay failed, send a test."""

from __future__ import annotations

from typing import Any

from fastapi import Query

from ..errors import BadRequest
from ..events.types import ALL_TYPES
from ..store.outbox import STATES
from .deps import CurrentUser, RuntimeDep
from .params import Id, Offset
from .responses import Delivery, DeliveryList, RetriedCount, WebhookTestResult, answers
from .routing import SlashRouter

router = SlashRouter(tags=["webhooks"])
INT64_MAX = 2**63 - 1


def _delivery_cursor(value: str | None) -> int | None:
    """A delivery id from ``after=`` (None when absent); 400 ``invalid_cursor`` otherwise."""
    if value is None or value == "":
        return None
    try:
        cursor = int(value)
    except ValueError:
        cursor = -1
    if not 0 < cursor <= INT64_MAX:
        raise BadRequest(f"after={value!r} is not a delivery id", code="invalid_cursor",
                         details=[{"field": "query.after", "value": value}])
    return cursor


@router.get("/api/v2/simulation/{simulation_id}/webhook_deliveries", **answers(DeliveryList))
async def list_deliveries(
    simulation_id: Id,
    user: CurrentUser,
    runtime: RuntimeDep,
    status: str | None = Query(None, description="pending, delivering, succeeded, failed, "
                               "disabled", json_schema_extra={"enum": list(STATES)}),
    message_type: str | None = Query(None, description="Only deliveries of this event type.",
                                     json_schema_extra={"enum": sorted(ALL_TYPES)}),
    limit: int = Query(100, ge=1, le=1000),
    offset: Offset = 0,
    after: str | None = Query(None, description="Only the deliveries listed after this "
                              "delivery id (older ones): pass the previous page's "
                              "`meta.next_after`."),
) -> dict[str, Any]:
    """The simulation's webhook deliveries, newest first, each with its attempts.

    A page ends after ``limit`` deliveries or before the one that would take it past
    ``RIDECAST_MAX_PAGE_BYTES`` (``meta.truncated`` is then true); a delivery larger than
    that budget comes alone on its page. Passing ``meta.next_after`` as ``after=`` reaches
    every delivery. ``meta.total_count`` is exact for pending, delivering, failed and
    disabled deliveries; succeeded ones, or all, are counted among the simulation's newest
    10,000 (past that, ``meta.total_count_exact`` is false: at least that many match).
    ``meta.backlog`` counts the simulation's deliveries still to send and
    ``meta.oldest_undelivered_age_s`` is the age of the oldest of their events.
    """
    await runtime.simulations.get(user, simulation_id)
    cursor = _delivery_cursor(after)
    if status is not None and status not in STATES:
        raise BadRequest(
            f"unknown status {status!r}; valid values: {', '.join(STATES)}",
            code="invalid_query", details=[{"field": "query.status", "value": status}],
        )
    if message_type is not None and message_type not in ALL_TYPES:
        raise BadRequest(
            f"unknown message_type {message_type!r}; valid values: {', '.join(sorted(ALL_TYPES))}",
            code="unknown_message_type",
            details=[{"field": "query.message_type", "value": message_type}],
        )
    objects, page, truncated = await runtime.webhooks.list(
        simulation_id, status=status, message_type=message_type, limit=limit, offset=offset,
        after=cursor,
    )
    backlog, oldest_age = await runtime.webhooks.backlog(simulation_id)
    return {
        "objects": objects,
        "meta": {"limit": limit, "offset": offset, "total_count": page.total,
                 "total_count_exact": page.total_exact, "count": len(objects),
                 "after": None if cursor is None else str(cursor),
                 "next_after": str(objects[-1]["id"]) if objects else None,
                 "truncated": truncated, "backlog": backlog,
                 "oldest_undelivered_age_s": oldest_age},
    }


@router.post("/api/v2/simulation/{simulation_id}/webhook_deliveries/retry_failed",
             **answers(RetriedCount))
async def retry_failed(
    simulation_id: Id, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    """Queue every failed or disabled delivery of the simulation again (bulk replay)."""
    await runtime.simulations.get(user, simulation_id)
    return {"retried": await runtime.webhooks.retry_failed(simulation_id)}


@router.post("/api/v2/simulation/{simulation_id}/webhook_deliveries/{delivery_id}/retry",
             **answers(Delivery))
async def retry_delivery(
    simulation_id: Id, delivery_id: Id, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    """Queue one delivery again, now (whatever its status, unless it is being sent)."""
    await runtime.simulations.get(user, simulation_id)
    return await runtime.webhooks.retry(simulation_id, delivery_id)


@router.post("/api/v2/simulation/{simulation_id}/webhook_test", **answers(WebhookTestResult))
async def webhook_test(
    simulation_id: Id, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    """Send a ``webhook_test`` event to the configured URL now and return the outcome."""
    record = await runtime.simulations.get(user, simulation_id)
    return await runtime.webhooks.send_test(simulation_id, record.data)
