"""Each REST call of the SDK described once, for the sync and the async client alike.

A ``Call`` is what to send and how to read the answer; ``Client`` and ``AsyncClient`` only
differ in how they send it. Errors are translated here (``check``), so neither client lets an
httpx exception or an error body through untranslated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
import pydantic

from ..events import Envelope, parse_event
from .errors import APIError, ClientError, TransportError, api_error
from .models import EventPage, Simulation

T = TypeVar("T")

SIMULATION = "/api/v2/simulation"
MAX_WEBHOOK_ATTEMPTS = 5

_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One HTTP request and the parser of its successful response."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, Any] | list[tuple[str, Any]] | None = None
    json: Any = _UNSET
    headers: dict[str, str] = field(default_factory=dict)

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": self.params, "headers": self.headers}
        if self.json is not _UNSET:
            kwargs["json"] = self.json
        return kwargs


def check(response: httpx.Response) -> httpx.Response:
    """The response if it succeeded; otherwise the ``APIError`` of its error body."""
    if response.is_success:
        return response
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise api_error(response.status_code, body)


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def try_next_node(method: str, exc: httpx.HTTPError) -> bool:
    """Whether a call that failed with ``exc`` may be sent to another node of the cluster:
    when it never left (no connection), or when it is safe to send twice (a GET)."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return True
    return method.upper() in _SAFE_METHODS and isinstance(exc, httpx.TransportError)


def transport_error(exc: httpx.HTTPError) -> ClientError:
    """The SDK exception for an httpx failure that has no response."""
    return TransportError(f"{type(exc).__name__}: {exc}")


def _json(response: httpx.Response) -> Any:
    return response.json() if response.content else None


def _simulation(response: httpx.Response) -> Simulation:
    return Simulation.from_json(response.json(), response.headers.get("ETag"))


def _none(response: httpx.Response) -> None:
    return None


def token() -> Call[str]:
    return Call("GET", "/api/v2/user/token/", lambda r: str(r.json()["token"]))


def list_simulations(limit: int = 100, offset: int = 0) -> Call[list[Simulation]]:
    def parse(response: httpx.Response) -> list[Simulation]:
        return [Simulation.from_json(obj) for obj in response.json()["objects"]]

    return Call("GET", SIMULATION, parse, params={"limit": limit, "offset": offset})


def get_simulation(simulation_id: int) -> Call[Simulation]:
    return Call("GET", f"{SIMULATION}/{simulation_id}", _simulation)


def create_simulation(
    name: str, data: dict[str, Any] | None = None, template_id: int | None = None
) -> Call[Simulation]:
    body: dict[str, Any] = {"name": name, "data": data if data is not None else {}}
    if template_id is not None:
        body["template_id"] = template_id
    return Call("POST", SIMULATION, _simulation, json=body)


def patch_simulation(
    simulation_id: int,
    *,
    name: str | None = None,
    data: Any = _UNSET,
    if_match: str | None = None,
) -> Call[Simulation]:
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if data is not _UNSET:
        body["data"] = data
    headers = {"If-Match": if_match} if if_match else {}
    return Call("PATCH", f"{SIMULATION}/{simulation_id}", _simulation, json=body, headers=headers)


def delete_simulation(simulation_id: int) -> Call[None]:
    return Call("DELETE", f"{SIMULATION}/{simulation_id}", _none)


EventsBody = Envelope | Mapping[str, Any] | Iterable[Envelope | Mapping[str, Any]]


def post_events(simulation_id: int, events: EventsBody) -> Call[list[str]]:
    def one(event: Envelope | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(event, Envelope):
            return event.model_dump(mode="json", exclude_none=True)
        return dict(event)

    if isinstance(events, (Envelope, Mapping)):
        body: Any = one(events)
    else:
        body = [one(event) for event in events]
    return Call(
        "POST", f"{SIMULATION}/{simulation_id}/events",
        lambda r: [str(i) for i in r.json()["event_ids"]], json=body,
    )


def parse_history_event(obj: dict[str, Any]) -> Envelope:
    """A stored event as a typed model; an event of a type this SDK does not know yet stays a
    plain ``Envelope`` rather than failing the whole page."""
    try:
        return parse_event(obj)
    except pydantic.ValidationError:
        return Envelope.model_validate(obj)


def events(
    simulation_id: int,
    *,
    after: str | None = None,
    message_type: str | Iterable[str] | None = None,
    limit: int = 100,
) -> Call[EventPage]:
    params: list[tuple[str, Any]] = [("limit", limit)]
    if after is not None:
        params.append(("after", after))
    if message_type is not None:
        types = [message_type] if isinstance(message_type, str) else list(message_type)
        params.extend(("message_type", t) for t in types)

    def parse(response: httpx.Response) -> EventPage:
        body = response.json()
        meta = body.get("meta", {})
        return EventPage(
            [parse_history_event(obj) for obj in body["objects"]], meta.get("next_after"), meta
        )

    return Call("GET", f"{SIMULATION}/{simulation_id}/events", parse, params=params)


def webhook_deliveries(simulation_id: int, **filters: Any) -> Call[Any]:
    params = {key: value for key, value in filters.items() if value is not None}
    return Call("GET", f"{SIMULATION}/{simulation_id}/webhook_deliveries", _json, params=params)


def retry_delivery(simulation_id: int, delivery_id: int | str) -> Call[Any]:
    return Call(
        "POST", f"{SIMULATION}/{simulation_id}/webhook_deliveries/{delivery_id}/retry", _json
    )


def retry_failed(simulation_id: int) -> Call[Any]:
    return Call("POST", f"{SIMULATION}/{simulation_id}/webhook_deliveries/retry_failed", _json)


def webhook_test(simulation_id: int) -> Call[Any]:
    return Call("POST", f"{SIMULATION}/{simulation_id}/webhook_test", _json)


SIMULATOR_ACTIONS = ("start", "pause", "resume", "stop")


def simulator_status(simulation_id: int) -> Call[Any]:
    return Call("GET", f"{SIMULATION}/{simulation_id}/simulator", _json)


def simulator_action(simulation_id: int, action: str) -> Call[Any]:
    if action not in SIMULATOR_ACTIONS:
        raise ValueError(f"unknown simulator action {action!r}; valid: "
                         f"{', '.join(SIMULATOR_ACTIONS)}")
    return Call("POST", f"{SIMULATION}/{simulation_id}/simulator/{action}", _json)


def lost_race(exc: APIError, attempt: int) -> bool:
    """Whether a read-merge-PATCH should read again: a 412 with attempts left."""
    return exc.status == 412 and attempt + 1 < MAX_WEBHOOK_ATTEMPTS
