"""Event ingest: validate, stamp, serialise once, append to the log (which publishes).

Every producer goes through here: ``POST .../events``, the simulator and the REST operations.
A batch is all or nothing: one bad event rejects it with the index and field of each error,
and nothing is stored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from .bus import StoredEvent
from .errors import BadRequest, NotFound
from .events import ALL_TYPES, EVENT_ADAPTER, MessageType
from .events.quick_check import quick_valid
from .isotime import iso_from_ns
from .metrics import count_ingested
from .simulations import SimulationCatalog, SimulationMeta
from .store.eventlog import EventLog, NewEvent
from .store.run_fence import RunFence

_GPS = MessageType.GPS_DATA.value


def now_iso() -> str:
    """The current time as an ISO 8601 timestamp with offset (server_ts)."""
    return iso_from_ns(time.time_ns())


def _loc(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def _item_errors(index: int, exc: ValidationError) -> list[dict[str, Any]]:
    details: list[dict[str, Any]] = []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        # The discriminated union puts the model's tag first ("bookings", ...): drop it.
        if loc and isinstance(loc[0], str) and loc[0] in ALL_TYPES:
            loc = loc[1:]
        if err["type"] == "union_tag_invalid":
            code, field = "unknown_message_type", "message_type"
            message = (
                f"unknown message_type {err.get('input', {}).get('message_type')!r}; "
                f"valid values: {', '.join(sorted(ALL_TYPES))}"
                if isinstance(err.get("input"), dict)
                else err["msg"]
            )
        elif err["type"] == "union_tag_not_found":
            code, field, message = "validation_error", "message_type", "message_type is required"
        else:
            code, field, message = "validation_error", _loc(loc), err["msg"]
        details.append({"index": index, "field": field, "code": code, "message": message})
    return details


class Ingest:
    """Turns envelope dicts into stored, published events."""

    def __init__(self, catalog: SimulationCatalog, log: EventLog, *, max_batch: int) -> None:
        self._catalog = catalog
        self._log = log
        self.max_batch = max_batch

    def prepare(self, meta: SimulationMeta, items: Sequence[Any], *,
                validate: bool = True, from_json: bool = False) -> list[NewEvent]:
        """Validate and stamp ``items`` for simulation ``meta``; raises ``BadRequest``.

        Each item is stored as it was sent (unknown fields and number formats kept), with
        ``simulation_id`` set from the path, ``server_ts`` filled when missing (gps_data
        excepted) and any client-sent ``event_id`` removed (ridecast assigns it).
        ``validate=False`` skips the check against the models, for the in-process
        simulator only (see ``submit_trusted``). ``from_json=True`` says that ``items``
        were parsed from JSON text (plain dicts, lists, strings, numbers) for this call
        alone: each is then checked by ``events.quick_check`` first, and by the models only
        when that check cannot tell (same answers, fewer costs: see that module), and may
        be changed in place rather than copied.
        """
        if len(items) > self.max_batch:
            raise BadRequest(
                f"a batch holds at most {self.max_batch} events, this one {len(items)}",
                details=[{"field": "", "max": self.max_batch, "got": len(items)}],
            )
        stamp = now_iso()
        errors: list[dict[str, Any]] = []
        prepared: list[NewEvent] = []
        webhook = None if meta.webhook_disabled else meta.webhook
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                errors.append(
                    {
                        "index": index,
                        "field": "",
                        "code": "validation_error",
                        "message": f"an event must be a JSON object, not {type(item).__name__}",
                    }
                )
                continue
            sim_id = item.get("simulation_id", meta.id)
            if sim_id != meta.id or isinstance(sim_id, bool):
                errors.append(
                    {
                        "index": index,
                        "field": "simulation_id",
                        "code": "simulation_id_mismatch",
                        "message": f"simulation_id {sim_id!r} differs from the path's {meta.id}",
                    }
                )
                continue
            # simulation_id first when the producer left it out; in place when it sent it.
            if from_json and "simulation_id" in item:
                event = item  # parsed for this call alone: changed, not copied
            else:
                event = {"simulation_id": meta.id, **item}
            event.pop("event_id", None)
            if event.get("server_ts") is None and event.get("message_type") != _GPS:
                event["server_ts"] = stamp
            # Validate the bytes we store anyway: pydantic's JSON path is faster than
            # walking the dict again, and it checks exactly what consumers will receive.
            try:
                body = orjson.dumps(event)
                if validate and not (from_json and quick_valid(event)):
                    EVENT_ADAPTER.validate_json(body)
            except ValidationError as exc:
                errors.extend(_item_errors(index, exc))
                continue
            except TypeError as exc:  # only from in-process producers: not JSON-able
                errors.append({"index": index, "field": "", "code": "validation_error",
                               "message": f"not serialisable as JSON: {exc}"})
                continue
            message_type = event["message_type"]
            prepared.append(
                NewEvent(
                    simulation_id=meta.id,
                    org_id=meta.org_id,
                    owner_id=meta.owner_id,
                    message_type=message_type,
                    body=body,
                    webhook_url=webhook.url if webhook and webhook.wants(message_type) else None,
                    webhook_ordered=webhook.ordered if webhook else True,
                )
            )
        if errors:
            codes = {e["code"] for e in errors}
            code = codes.pop() if len(codes) == 1 else "validation_error"
            noun = "event" if len(items) == 1 else f"batch of {len(items)} events"
            raise BadRequest(
                f"{len(errors)} error(s) in the {noun}; nothing was stored", code=code,
                details=errors,
            )
        return prepared

    async def submit(
        self, simulation_id: int, items: Sequence[Any], *, meta: SimulationMeta | None = None,
        validate: bool = True, from_json: bool = False, fence: RunFence | None = None,
    ) -> list[StoredEvent]:
        """Validate, append and publish ``items`` for ``simulation_id``, all or nothing.

        ``meta``: the simulation's, when the caller has just looked it up (the API has, to
        check visibility): no second lookup. ``from_json``: see ``prepare``. ``fence``: the
        lease the append depends on (``EventLog.append``).
        """
        if meta is None or meta.id != simulation_id:
            meta = await self._catalog.get(simulation_id)
        if meta is None:
            raise NotFound(f"simulation {simulation_id} not found", code="simulation_not_found")
        stored = await self._log.append(self.prepare(meta, items, validate=validate,
                                                       from_json=from_json), fence=fence)
        count_ingested([event.message_type for event in stored])
        return stored

    async def submit_trusted(self, simulation_id: int, items: Sequence[Any], *,
                             fence: RunFence | None = None) -> list[StoredEvent]:
        """``submit`` for the in-process simulator, whose events are built from the same
        models and checked against them by its tests (tests/simulator: every event of a
        run on straight lines and on streets validates): stamped, serialised and stored
        without a second validation; with ``fence``, only while the run's owner holds its
        lease."""
        return await self.submit(simulation_id, items, validate=False, fence=fence)
