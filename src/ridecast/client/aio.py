"""``AsyncClient``: the asyncio SDK (httpx for REST, websockets for streams).

Example::

    async with AsyncClient() as client:          # $RIDECAST_URL, $RIDECAST_USER, $RIDECAST_API_KEY
        sim = await client.create_simulation("demo")
        await client.set_webhook(sim.id, "https://example.com/hook", ["assignment"])
        async for event in client.stream(sim.id, types=["gps_data"]):
            print(event.event_id, event.data.lat, event.data.lon)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ..events import Envelope
from . import calls
from .backoff import Backoff
from .errors import PreconditionFailedError
from .models import Connection, EventPage, Simulation
from .nodes import Nodes
from .protocol import merge_webhook, plan_channel, without_webhook
from .stream import EventStream, StreamStatus

T = TypeVar("T")


class AsyncClient:
    """Asynchronous ridecast client; every argument falls back to its ``RIDECAST_*`` variable.

    Errors are ``ridecast.client.ClientError`` subclasses (see ``ridecast.client.errors``).
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        user: str | None = None,
        key: str | None = None,
        ws_url: str | Sequence[str] | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.connection = Connection.resolve(url, user, key, ws_url)
        self._nodes = Nodes(self.connection.urls)
        self._http = httpx.AsyncClient(
            headers={**self.connection.auth_headers(), "User-Agent": "ridecast-client"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()

    async def _do(self, call: calls.Call[T]) -> T:
        # The node that answered last first; the others when it cannot be reached
        # (client/nodes.py).
        failure: httpx.HTTPError | None = None
        for index in self._nodes.order():
            try:
                response = await self._http.request(
                    call.method, self._nodes.urls[index] + call.path, **call.request_kwargs()
                )
            except httpx.HTTPError as exc:
                if not calls.try_next_node(call.method, exc):
                    raise calls.transport_error(exc) from exc
                self._nodes.failed(index)
                failure = exc
                continue
            self._nodes.answered(index)
            return call.parse(calls.check(response))
        assert failure is not None
        raise calls.transport_error(failure) from failure

    async def token(self) -> str:
        """A fresh websocket token (``GET /api/v2/user/token/``)."""
        return await self._do(calls.token())

    async def list_simulations(self, *, limit: int = 100, offset: int = 0) -> list[Simulation]:
        """The simulations visible to you."""
        return await self._do(calls.list_simulations(limit, offset))

    async def get_simulation(self, simulation_id: int) -> Simulation:
        """One simulation, with its ``etag``."""
        return await self._do(calls.get_simulation(simulation_id))

    async def create_simulation(
        self, name: str, data: dict[str, Any] | None = None, *, template_id: int | None = None
    ) -> Simulation:
        """Create a simulation (from a template's ``data`` when ``template_id`` is given)."""
        return await self._do(calls.create_simulation(name, data, template_id))

    async def patch_simulation(
        self, simulation_id: int, *, name: str | None = None, data: Any = calls._UNSET,
        if_match: str | None = None,
    ) -> Simulation:
        """PATCH a simulation; ``data`` replaces the whole object (prefer ``set_webhook``)."""
        return await self._do(
            calls.patch_simulation(simulation_id, name=name, data=data, if_match=if_match)
        )

    async def delete_simulation(self, simulation_id: int) -> None:
        """Delete a simulation."""
        await self._do(calls.delete_simulation(simulation_id))

    async def _merge_patch(
        self, simulation_id: int, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Simulation:
        # Read, merge, PATCH with If-Match; a 412 means another writer got in between, so
        # read their version and merge again rather than erase their keys.
        for attempt in range(calls.MAX_WEBHOOK_ATTEMPTS):
            current = await self.get_simulation(simulation_id)
            try:
                return await self.patch_simulation(
                    simulation_id, data=change(current.data), if_match=current.etag
                )
            except PreconditionFailedError as exc:
                if not calls.lost_race(exc, attempt):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def set_webhook(
        self, simulation_id: int, url: str, types: Iterable[str], secret: str | None = None
    ) -> Simulation:
        """Subscribe ``url`` to ``types``, keeping every other key of ``data`` (spec rule 2)."""
        wanted = list(types)
        return await self._merge_patch(
            simulation_id, lambda data: merge_webhook(data, url, wanted, secret)
        )

    async def clear_webhook(self, simulation_id: int) -> Simulation:
        """Remove the webhook keys from ``data``, keeping the others: deliveries stop."""
        return await self._merge_patch(simulation_id, without_webhook)

    async def post_events(
        self,
        simulation_id: int,
        events: Envelope | Mapping[str, Any] | Iterable[Envelope | Mapping[str, Any]],
    ) -> list[str]:
        """Append one event or a batch (all or nothing); returns their event_ids."""
        return await self._do(calls.post_events(simulation_id, events))

    async def events(
        self, simulation_id: int, *, after: str | None = None,
        message_type: str | Iterable[str] | None = None, limit: int = 100,
    ) -> EventPage:
        """One page of history after ``after``; continue with ``page.next_after``."""
        return await self._do(
            calls.events(simulation_id, after=after, message_type=message_type, limit=limit)
        )

    async def history(
        self, simulation_id: int, *, after: str | None = None,
        message_type: str | Iterable[str] | None = None, page_size: int = 500,
    ) -> AsyncIterator[Envelope]:
        """Every stored event after ``after``, page by page."""
        while True:
            page = await self.events(
                simulation_id, after=after, message_type=message_type, limit=page_size
            )
            for event in page.events:
                yield event
            if page.next_after is None or (len(page.events) < page_size
                                           and not page.meta.get("truncated")):
                return
            after = page.next_after

    async def webhook_deliveries(self, simulation_id: int, **filters: Any) -> Any:
        """The webhook delivery log (filters such as ``status=``, ``message_type=``)."""
        return await self._do(calls.webhook_deliveries(simulation_id, **filters))

    async def retry_delivery(self, simulation_id: int, delivery_id: int | str) -> Any:
        """Send one delivery again."""
        return await self._do(calls.retry_delivery(simulation_id, delivery_id))

    async def retry_failed(self, simulation_id: int) -> Any:
        """Queue every failed delivery of the simulation again."""
        return await self._do(calls.retry_failed(simulation_id))

    async def simulator(self, simulation_id: int) -> Any:
        """The built-in simulator's status, simulated clock and KPIs (``GET .../simulator``)."""
        return await self._do(calls.simulator_status(simulation_id))

    async def simulator_action(self, simulation_id: int, action: str) -> Any:
        """``start``, ``pause``, ``resume`` or ``stop`` the simulator; returns its status."""
        return await self._do(calls.simulator_action(simulation_id, action))

    async def webhook_test(self, simulation_id: int) -> Any:
        """Send a test event to the simulation's webhook and return the outcome."""
        return await self._do(calls.webhook_test(simulation_id))

    def stream(
        self,
        simulation_id: int | None = None,
        types: Iterable[str] | None = None,
        since: str | None = None,
        *,
        backoff: Backoff | None = None,
        on_status: Callable[[StreamStatus], None] | None = None,
    ) -> EventStream:
        """Typed events as they happen: ``async for event in client.stream(...)``.

        ``simulation_id`` None streams every visible simulation; ``types`` None every type.
        One type is filtered by the server; several are filtered here from one connection
        (one cursor, event_id order kept). Drops reconnect with back-off and resume from the
        last event_id; ``since`` resumes from an earlier one.
        """
        ws_bases = self.connection.stream_bases()
        return EventStream(
            ws_bases, self.token, plan_channel(simulation_id, types),
            since=since, backoff=backoff, on_status=on_status,
        )
