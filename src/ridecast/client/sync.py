"""``Client``: the blocking SDK, for scripts and notebooks without asyncio.

Example::

    with Client() as client:                  # $RIDECAST_URL, $RIDECAST_USER, $RIDECAST_API_KEY
        sim = client.create_simulation("demo")
        client.set_webhook(sim.id, "https://example.com/hook", ["assignment", "bookings"])
        for event in client.stream(sim.id):   # blocks; reconnects and resumes on drops
            print(event.event_id, event.message_type)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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


class Client:
    """Blocking ridecast client; every argument falls back to its ``RIDECAST_*`` variable.

    The methods match ``AsyncClient``'s; errors are ``ridecast.client.ClientError``s.
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        user: str | None = None,
        key: str | None = None,
        ws_url: str | Sequence[str] | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.connection = Connection.resolve(url, user, key, ws_url)
        self._nodes = Nodes(self.connection.urls)
        self._http = httpx.Client(
            headers={**self.connection.auth_headers(), "User-Agent": "ridecast-client"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def _do(self, call: calls.Call[T]) -> T:
        # The node that answered last first; the others when it cannot be reached
        # (client/nodes.py).
        failure: httpx.HTTPError | None = None
        for index in self._nodes.order():
            try:
                response = self._http.request(
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

    def token(self) -> str:
        """A fresh websocket token (``GET /api/v2/user/token/``)."""
        return self._do(calls.token())

    def list_simulations(self, *, limit: int = 100, offset: int = 0) -> list[Simulation]:
        """The simulations visible to you."""
        return self._do(calls.list_simulations(limit, offset))

    def get_simulation(self, simulation_id: int) -> Simulation:
        """One simulation, with its ``etag``."""
        return self._do(calls.get_simulation(simulation_id))

    def create_simulation(
        self, name: str, data: dict[str, Any] | None = None, *, template_id: int | None = None
    ) -> Simulation:
        """Create a simulation (from a template's ``data`` when ``template_id`` is given)."""
        return self._do(calls.create_simulation(name, data, template_id))

    def patch_simulation(
        self, simulation_id: int, *, name: str | None = None, data: Any = calls._UNSET,
        if_match: str | None = None,
    ) -> Simulation:
        """PATCH a simulation; ``data`` replaces the whole object (prefer ``set_webhook``)."""
        return self._do(
            calls.patch_simulation(simulation_id, name=name, data=data, if_match=if_match)
        )

    def delete_simulation(self, simulation_id: int) -> None:
        """Delete a simulation."""
        self._do(calls.delete_simulation(simulation_id))

    def _merge_patch(
        self, simulation_id: int, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Simulation:
        # Read, merge, PATCH with If-Match; on 412 read the other writer's version and merge
        # again (see AsyncClient._merge_patch).
        for attempt in range(calls.MAX_WEBHOOK_ATTEMPTS):
            current = self.get_simulation(simulation_id)
            try:
                return self.patch_simulation(
                    simulation_id, data=change(current.data), if_match=current.etag
                )
            except PreconditionFailedError as exc:
                if not calls.lost_race(exc, attempt):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def set_webhook(
        self, simulation_id: int, url: str, types: Iterable[str], secret: str | None = None
    ) -> Simulation:
        """Subscribe ``url`` to ``types``, keeping every other key of ``data`` (spec rule 2)."""
        wanted = list(types)
        return self._merge_patch(
            simulation_id, lambda data: merge_webhook(data, url, wanted, secret)
        )

    def clear_webhook(self, simulation_id: int) -> Simulation:
        """Remove the webhook keys from ``data``, keeping the others: deliveries stop."""
        return self._merge_patch(simulation_id, without_webhook)

    def post_events(
        self,
        simulation_id: int,
        events: Envelope | Mapping[str, Any] | Iterable[Envelope | Mapping[str, Any]],
    ) -> list[str]:
        """Append one event or a batch (all or nothing); returns their event_ids."""
        return self._do(calls.post_events(simulation_id, events))

    def events(
        self, simulation_id: int, *, after: str | None = None,
        message_type: str | Iterable[str] | None = None, limit: int = 100,
    ) -> EventPage:
        """One page of history after ``after``; continue with ``page.next_after``."""
        return self._do(
            calls.events(simulation_id, after=after, message_type=message_type, limit=limit)
        )

    def history(
        self, simulation_id: int, *, after: str | None = None,
        message_type: str | Iterable[str] | None = None, page_size: int = 500,
    ) -> Iterator[Envelope]:
        """Every stored event after ``after``, page by page."""
        while True:
            page = self.events(simulation_id, after=after, message_type=message_type,
                               limit=page_size)
            yield from page.events
            if page.next_after is None or (len(page.events) < page_size
                                           and not page.meta.get("truncated")):
                return
            after = page.next_after

    def webhook_deliveries(self, simulation_id: int, **filters: Any) -> Any:
        """The webhook delivery log (filters such as ``status=``, ``message_type=``)."""
        return self._do(calls.webhook_deliveries(simulation_id, **filters))

    def retry_delivery(self, simulation_id: int, delivery_id: int | str) -> Any:
        """Send one delivery again."""
        return self._do(calls.retry_delivery(simulation_id, delivery_id))

    def retry_failed(self, simulation_id: int) -> Any:
        """Queue every failed delivery of the simulation again."""
        return self._do(calls.retry_failed(simulation_id))

    def simulator(self, simulation_id: int) -> Any:
        """The built-in simulator's status, simulated clock and KPIs (``GET .../simulator``)."""
        return self._do(calls.simulator_status(simulation_id))

    def simulator_action(self, simulation_id: int, action: str) -> Any:
        """``start``, ``pause``, ``resume`` or ``stop`` the simulator; returns its status."""
        return self._do(calls.simulator_action(simulation_id, action))

    def webhook_test(self, simulation_id: int) -> Any:
        """Send a test event to the simulation's webhook and return the outcome."""
        return self._do(calls.webhook_test(simulation_id))

    def stream(
        self,
        simulation_id: int | None = None,
        types: Iterable[str] | None = None,
        since: str | None = None,
        *,
        backoff: Backoff | None = None,
        on_status: Callable[[StreamStatus], None] | None = None,
    ) -> Iterator[Envelope]:
        """Typed events as they happen, blocking (see ``AsyncClient.stream``).

        Runs the async stream on a private event loop; call it from plain (non-async) code.
        """
        async def token() -> str:
            return self.token()

        ws_bases = self.connection.stream_bases()
        stream = EventStream(
            ws_bases, token, plan_channel(simulation_id, types),
            since=since, backoff=backoff, on_status=on_status,
        )
        with asyncio.Runner() as runner:
            events = aiter(stream)

            async def step() -> Envelope:
                return await anext(events)

            try:
                while True:
                    try:
                        yield runner.run(step())
                    except StopAsyncIteration:
                        return
            finally:
                runner.run(stream.aclose())
