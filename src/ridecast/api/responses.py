"""The success bodies of every operation, as pydantic models: the schemas of /openapi.json.

A client generated from the document (openapi-python-client, openapi-typescript) gets
``Simulation.id`` as an integer and ``IngestResult.event_ids`` as a list of strings instead
of ``unknown``. The handlers still build their dicts (the views in ``simulation_views``, the
simulator's and the webhook service's own), which go out as they are: ``answers`` documents
a model without passing the answer through it, so documenting costs no time per request and
cannot change a byte on the wire. tests/api/test_openapi_client.py proves the two agree: it
generates a typed client from a live server's document and reads real answers with it, and
schemathesis (tests/api/test_openapi_fuzz.py) checks every answer against these schemas.

Fields a view may grow later are allowed (no model forbids extra fields), so a client built
today keeps reading tomorrow's answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..events.types import MessageType
from ..simulator.hosting.runner import Status
from ..webhooks.deliverylog import COUNT_LIMIT


def answers(model: type[BaseModel], status: int = 200, description: str | None = None,
            ) -> dict[str, Any]:
    """Route keyword arguments documenting ``model`` as the ``status`` answer's body.

    ``response_model=None``: the handler's dict is sent as it is, not validated again.
    """
    doc = (model.__doc__ or "").strip().splitlines()
    return {"response_model": None, "responses": {status: {
        "model": model, "description": description or (doc[0] if doc else model.__name__),
    }}}


def _json_object() -> Any:
    return Field(description="A JSON object (free-form settings), or null.")


class Simulation(BaseModel):
    """A simulation."""

    id: int
    name: str
    data: dict[str, Any] | None = _json_object()
    template_id: int | None = Field(description="The template it was created from, if any.")
    owner_id: int
    organisation_id: int
    version: int = Field(description="Bumped by every change (the ETag is made from it).")
    created_at: datetime
    updated_at: datetime
    messaging_webhook_disabled_at: datetime | None = Field(
        description="When the webhook was disabled (a 410 from the receiver); null while on.")
    messaging_webhook_disabled_reason: str | None


class ListMeta(BaseModel):
    """Paging of a list: the ``limit`` and ``offset`` asked for, and how many there are."""

    limit: int
    offset: int
    total_count: int
    next_offset: int | None = Field(None, description="The offset= of the next page; null "
                                                      "after the last.")
    truncated: bool = Field(False, description="True when the page stopped at "
                                               "RIDECAST_MAX_PAGE_BYTES before limit.")


class SimulationList(BaseModel):
    """The simulations visible to you."""

    objects: list[Simulation]
    meta: ListMeta


class Template(BaseModel):
    """A simulation template."""

    id: int
    name: str
    data: dict[str, Any] | None = _json_object()
    owner_id: int
    organisation_id: int
    version: int = Field(1, description="Bumped by every change (the ETag is made from it).")
    created_at: datetime
    updated_at: datetime | None = None


class TemplateList(BaseModel):
    """The templates visible to you."""

    objects: list[Template]
    meta: ListMeta


class IngestResult(BaseModel):
    """The events stored, in the order sent."""

    event_ids: list[str] = Field(description="Each event's event_id (a cursor for after= "
                                             "and since=), in the order sent.")
    count: int


class EventPageMeta(BaseModel):
    """Where a page of history starts and where the next one does."""

    after: str = Field(description="The cursor this page was read after.")
    limit: int
    count: int = Field(description="Events on this page.")
    next_after: str | None = Field(description="The after= of the next page; null when this "
                                               "page is empty.")
    truncated: bool = Field(description="True when the page stopped at "
                                        "RIDECAST_MAX_PAGE_BYTES: more events follow although "
                                        "count is below limit.")


class EventPage(BaseModel):
    """A page of a simulation's events, oldest first."""

    objects: list[dict[str, Any]] = Field(
        description="Stored events: each an envelope with its event_id.",
        json_schema_extra={"items": {"$ref": "#/components/schemas/Event"}},
    )
    meta: EventPageMeta


class MeasuredKpis(BaseModel):
    """KPIs after the warm-up (``data.simulator.kpi_warmup_s``); see docs/simulator.md."""

    requests: int | None = None
    served: int | None = None


class Punctuality(BaseModel):
    """Actual pickup minus the offered pickup time, over the pickups so far."""

    pickups: int | None = None
    late_mean_s: float | None = None
    late_p95_s: float | None = None
    punctual_share: float | None = None
    window_s: float | None = None


class Kpis(BaseModel):
    """The run's KPIs so far; empty before the first start (docs/simulator.md)."""

    bookings: int | None = None
    offered: int | None = None
    accepted: int | None = None
    offers_rejected: int | None = None
    offers_expired: int | None = None
    served: int | None = None
    on_board: int | None = None
    no_offer: int | None = None
    rejected_rate: float | None = None
    no_shows: int | None = None
    cancellations: int | None = None
    wait_mean_s: float | None = None
    wait_p95_s: float | None = None
    ride_over_direct_mean: float | None = None
    vehicle_km: float | None = None
    empty_km: float | None = None
    passenger_km: float | None = None
    occupancy: float | None = None
    vehicles: int | None = None
    vehicles_enabled: int | None = None
    events: int | None = None
    events_by_type: dict[str, int] | None = None
    measured: MeasuredKpis | None = None
    served_share: float | None = Field(None, description="Served ÷ booking requests.")
    fleet_utilisation: float | None = Field(
        None, description="Share of vehicle time with stops to make.")
    pooling_share: float | None = Field(
        None, description="Served riders who shared any part of their ride.")
    distance_saved: float | None = Field(
        None, description="Direct km of served riders ÷ vehicle-km.")
    rides_per_vehicle_hour: float | None = None
    rebalancing_km: float | None = Field(
        None, description="Vehicle-km driven towards rebalancing targets.")
    punctuality: Punctuality | None = None


class SimulatorStatus(BaseModel):
    """The built-in simulator's state, simulated clock and KPIs."""

    status: Status = Field(description="interrupted: the node running it went away; "
                                       "start it again.")
    sim_ts: str | None = Field(description="Simulated time now (ISO 8601); null when idle.")
    started_sim_ts: str | None = None
    error: str | None = None
    interrupted_status: str | None = Field(None, description="The status it had when its "
                                                             "node went away.")
    settings: dict[str, Any] | None = Field(None, description="The effective data.simulator.")
    kpis: Kpis
    engine_cpu_s: float | None = Field(
        None, description="CPU seconds the run's engine has computed on the node that runs "
        "it (since the run started there or was taken over). Runs at speed \"max\" that "
        "share an engine process gain it at the same rate per organisation.")


def _published() -> Any:
    return Field(description="The message types of the events the operation caused, in order.")


class BookingView(BaseModel):
    """A booking as the simulator holds it."""

    id: int
    uid: str
    pickup_lat: float
    pickup_lon: float
    dropoff_lat: float
    dropoff_lon: float
    passengers: int
    requested_ts: str
    max_wait_s: float
    status: str
    vehicle_id: int | None
    offer_id: int | None
    pickup_node_id: int | None
    dropoff_node_id: int | None


class OfferView(BaseModel):
    """An offer as the simulator holds it."""

    id: int
    uid: str
    booking_id: int
    vehicle_id: int
    status: str
    estimated_pickup_time: str
    expires_ts: str


class VehicleView(BaseModel):
    """A vehicle as the simulator holds it."""

    id: int
    agent_id: str
    enabled: bool
    status: str
    lat: float
    lon: float
    route: list[int] = Field(description="Ids of the nodes still on its route, in order.")
    load: int


class BookingCreated(BaseModel):
    """The new booking, its offer (null when no vehicle could take it), what was published."""

    booking: BookingView
    offer: OfferView | None
    published: list[MessageType] = _published()


class BookingChanged(BaseModel):
    """The booking after the operation, and what was published."""

    booking: BookingView
    published: list[MessageType] = _published()


class OfferAnswered(BaseModel):
    """The offer after the answer, and what was published."""

    offer: OfferView
    published: list[MessageType] = _published()


class OfferAccepted(BaseModel):
    """The accepted offer, its booking, and what was published."""

    offer: OfferView
    booking: BookingView
    published: list[MessageType] = _published()


class VehicleChanged(BaseModel):
    """The vehicle after the operation, and what was published."""

    vehicle: VehicleView
    published: list[MessageType] = _published()


class NodeCompleted(BaseModel):
    """The booking and vehicle after the driver's action, and what was published."""

    booking: BookingView
    vehicle: VehicleView
    published: list[MessageType] = _published()


class DeliveryAttempt(BaseModel):
    """One POST of a delivery to the webhook URL."""

    started_at: datetime | None
    latency_ms: float | None
    status_code: int | None = Field(description="The receiver's status; null when none came.")
    error_class: str | None
    error: str | None
    response_body: str | None = Field(description="The start of the receiver's body.")


class Delivery(BaseModel):
    """One event's webhook delivery, with its attempts oldest first."""

    id: int
    webhook_id: str = Field(description="The webhook-id header: the same on every retry.")
    event_id: str
    simulation_id: int
    message_type: str
    url: str
    status: str = Field(description="pending, delivering, succeeded, failed or disabled.")
    attempt_count: int
    next_attempt_at: datetime | None
    last_error: str | None
    created_at: datetime | None
    updated_at: datetime | None
    attempts: list[DeliveryAttempt]


class DeliveryListMeta(BaseModel):
    """Paging of the delivery log, and the simulation's backlog."""

    limit: int
    offset: int
    total_count: int = Field(description="Deliveries matching the filters: exact for "
                                         "pending, delivering, failed and disabled; for "
                                         "succeeded or no status, counted among the "
                                         f"simulation's newest {COUNT_LIMIT:,} deliveries "
                                         "(see total_count_exact).")
    total_count_exact: bool = Field(description="False when the simulation has more than "
                                                f"{COUNT_LIMIT:,} deliveries and the count "
                                                "was of succeeded or all of them: at least "
                                                "total_count match.")
    count: int = Field(description="Deliveries on this page.")
    after: str | None = Field(description="The after= this page was read after (a delivery "
                                          "id), or null.")
    next_after: str | None = Field(description="The after= of the next page (older "
                                               "deliveries); null when this page is empty.")
    truncated: bool = Field(description="True when the page stopped at "
                                        "RIDECAST_MAX_PAGE_BYTES: more deliveries follow "
                                        "although count is below limit.")
    backlog: int = Field(description="The simulation's deliveries still to send (pending "
                                     "or in flight).")
    oldest_undelivered_age_s: float | None = Field(
        description="Age in seconds of the oldest event whose delivery is still to send; "
                    "null when there is none.")


class DeliveryList(BaseModel):
    """A simulation's webhook deliveries, newest first."""

    objects: list[Delivery]
    meta: DeliveryListMeta


class RetriedCount(BaseModel):
    """How many failed or disabled deliveries were queued again."""

    retried: int


class WebhookTestResult(BaseModel):
    """The outcome of one webhook_test POST to the configured URL."""

    url: str
    webhook_id: str
    ok: bool
    started_at: datetime | None
    latency_ms: float
    status_code: int | None
    error_class: str | None
    error: str | None
    response_body: str | None


class Health(BaseModel):
    """The process lives and its store answers."""

    status: Literal["ok"]
    version: str
    oldest_event_id: str
    last_event_id: str


class Readiness(BaseModel):
    """This node can take traffic: its store and its bus answer."""

    status: Literal["ready"]
    store: str
    bus: str | None = Field(None, description="Absent with the in-process bus.")
    limits: str = Field(description="Where the limits are counted: `memory` (one process), "
                        "`redis` (the whole cluster), or `local fallback: ...` while this "
                        "node cannot reach Redis and counts alone.")


class EventSchemaDocument(BaseModel):
    """The JSON Schema document of every event (``ridecast schema``): a ``oneOf`` of the 18
    types, each in ``$defs``."""

    model_config = ConfigDict(extra="allow")

    json_schema_dialect: str = Field(alias="$schema")
    title: str
    definitions: dict[str, Any] = Field(alias="$defs",
                                        description="The 18 event types and their parts.")
    oneOf: list[dict[str, Any]] = Field(description="One $ref per event type.")


class AsyncApiDocument(BaseModel):
    """The AsyncAPI document of the websocket streams and the webhook."""

    asyncapi: str
    info: dict[str, Any]
    channels: dict[str, Any]
    components: dict[str, Any]
