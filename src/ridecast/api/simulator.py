"""Routes of the built-in simulator and of the operations that drive a simulation.

Control: ``POST simulation/{id}/simulator/start|pause|resume|stop``, ``GET simulation/{id}/
simulator``. Operations (need a running or paused simulator): bookings and their
cancellation, offer answers, vehicle enable/disable and GPS position, a driver app's node
status. Each answers with the changed objects and ``published``, the message types of the
events it caused, in order; a refused operation publishes nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import status
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ServiceUnavailable
from ..ports import SimulatorHost
from ..runtime import Runtime
from ..simulator.core.commands import Command
from ..simulator.core.operations import MAX_GPS_SPEED_MS
from ..simulator.core.settings import MAX_WAIT_S, read_settings
from .deps import CurrentUser, RuntimeDep
from .jsonlimits import INT64_MAX, INT64_MIN
from .params import Id
from .responses import (
    BookingChanged,
    BookingCreated,
    NodeCompleted,
    OfferAccepted,
    OfferAnswered,
    SimulatorStatus,
    VehicleChanged,
    answers,
)
from .routing import SlashRouter

router = SlashRouter(tags=["simulator"])

_SIM = "/api/v2/simulation/{simulation_id}"


class BookingCreate(BaseModel):
    """Body of ``POST simulation/{id}/bookings``: a rider app's request."""

    model_config = ConfigDict(extra="forbid")

    pickup_lat: float = Field(ge=-90, le=90)
    pickup_lon: float = Field(ge=-180, le=180)
    dropoff_lat: float = Field(ge=-90, le=90)
    dropoff_lon: float = Field(ge=-180, le=180)
    passengers: int = Field(1, ge=1, le=100)
    max_wait_s: float | None = Field(None, gt=0, le=MAX_WAIT_S,
                                     description="Default: the simulator's.")


class PositionPush(BaseModel):
    """Body of ``POST .../vehicles/{vehicle_id}/position``: a driver app's GPS fix."""

    model_config = ConfigDict(extra="forbid")

    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    bearing: float | None = Field(None, ge=0, lt=360)
    speed: float | None = Field(None, ge=0, le=MAX_GPS_SPEED_MS, description="m/s")


class NodeStatusUpdate(BaseModel):
    """Body of ``POST .../nodes/{node_id}/status``: what the driver did at the node."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["pickup_success", "dropoff_success", "no_show"]
    vehicle_id: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX,
                                   description="When given, must own the node.")
    driver_note: str | None = Field(None, max_length=2000)


class ControlBody(BaseModel):
    """Body of ``start``, ``pause``, ``resume`` and ``stop``: none, or an empty object. The
    run's settings come from the simulation's ``data.simulator``, never from here, so any
    field is refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid")


def host_of(runtime: Runtime) -> SimulatorHost:
    """The simulator host of this process (every ``serve`` process has one)."""
    if runtime.simulator is None:  # pragma: no cover - only ``ridecast worker`` has none
        raise ServiceUnavailable("this process runs no simulator", retry_after=5)
    return runtime.simulator


async def _control(runtime: Runtime, user: Any, simulation_id: int) -> SimulatorHost:
    await runtime.simulations.get(user, simulation_id)  # 404 unless visible
    return host_of(runtime)


async def _operate(runtime: Runtime, user: Any, simulation_id: int, name: str,
                   **args: Any) -> dict[str, Any]:
    host = await _control(runtime, user, simulation_id)
    return await host.operate(simulation_id, Command(name, args))


@router.post(_SIM + "/simulator/start", **answers(SimulatorStatus))
async def start_simulator(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep,
                          body: ControlBody | None = None) -> dict[str, Any]:
    """Start the simulator with the simulation's ``data.simulator`` settings. A start that
    would break a quota of the simulation's organisation (runs, vehicles) is refused and
    starts nothing (docs/simulator.md, "Quotas")."""
    record = await runtime.simulations.get(user, simulation_id)
    host = host_of(runtime)
    if runtime.quotas is None:
        return await host.start(simulation_id, record.data, org=record.org_id)
    vehicles = read_settings(record.data).vehicles  # a bad setting is its 400 first
    # Held until the run's row says running with its vehicles: the next start of the
    # organisation, on any node, counts this one.
    async with runtime.quotas.run_slot(record.org_id, simulation_id, vehicles):
        return await host.start(simulation_id, record.data, org=record.org_id)


@router.post(_SIM + "/simulator/pause", **answers(SimulatorStatus))
async def pause_simulator(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep,
                          body: ControlBody | None = None) -> dict[str, Any]:
    """Freeze simulated time; operations still apply at the frozen time."""
    return await (await _control(runtime, user, simulation_id)).pause(simulation_id)


@router.post(_SIM + "/simulator/resume", **answers(SimulatorStatus))
async def resume_simulator(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep,
                           body: ControlBody | None = None) -> dict[str, Any]:
    """Continue a paused simulator."""
    return await (await _control(runtime, user, simulation_id)).resume(simulation_id)


@router.post(_SIM + "/simulator/stop", **answers(SimulatorStatus))
async def stop_simulator(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep,
                         body: ControlBody | None = None) -> dict[str, Any]:
    """Stop the simulator for good (start begins a new run)."""
    return await (await _control(runtime, user, simulation_id)).stop(simulation_id)


@router.get(_SIM + "/simulator", **answers(SimulatorStatus))
async def get_simulator_status(simulation_id: Id, user: CurrentUser,
                     runtime: RuntimeDep) -> dict[str, Any]:
    """``{"status", "sim_ts", "kpis", ...}``: status is idle, running, paused, finished,
    stopped or interrupted (a run from before takeovers whose node went away: start it
    again); a running or paused run also says ``owner_node`` and ``takeover`` (null,
    pending or replaying). Live on the node that runs it, its last snapshot on the others
    (docs/simulator-ownership.md)."""
    return await (await _control(runtime, user, simulation_id)).status(simulation_id)


@router.post(_SIM + "/bookings", status_code=status.HTTP_201_CREATED,
             **answers(BookingCreated, 201))
async def create_booking(simulation_id: Id, body: BookingCreate, user: CurrentUser,
                         runtime: RuntimeDep) -> dict[str, Any]:
    """A booking: bookings, calc_started, then scheduler_result and offers, or no_offer."""
    return await _operate(runtime, user, simulation_id, "create_booking",
                          **body.model_dump(mode="json"))


@router.post(_SIM + "/bookings/{booking_id}/cancel", **answers(BookingChanged))
async def cancel_booking(simulation_id: Id, booking_id: Id, user: CurrentUser,
                         runtime: RuntimeDep) -> dict[str, Any]:
    """bookings_cancellation, and the new route of the vehicle that was to serve it."""
    return await _operate(runtime, user, simulation_id, "cancel_booking", booking_id=booking_id)


@router.post(_SIM + "/offers/{offer_id}/accept", **answers(OfferAccepted))
async def accept_offer(simulation_id: Id, offer_id: Id, user: CurrentUser,
                       runtime: RuntimeDep) -> dict[str, Any]:
    """offer_accepted, then assignment and vehicle_state_changed."""
    return await _operate(runtime, user, simulation_id, "accept_offer", offer_id=offer_id)


@router.post(_SIM + "/offers/{offer_id}/reject", **answers(OfferAnswered))
async def reject_offer(simulation_id: Id, offer_id: Id, user: CurrentUser,
                       runtime: RuntimeDep) -> dict[str, Any]:
    """offer_rejected."""
    return await _operate(runtime, user, simulation_id, "reject_offer", offer_id=offer_id)


@router.post(_SIM + "/vehicles/{vehicle_id}/enable", **answers(VehicleChanged))
async def enable_vehicle(simulation_id: Id, vehicle_id: Id, user: CurrentUser,
                         runtime: RuntimeDep) -> dict[str, Any]:
    """vehicle_use (enabled)."""
    return await _operate(runtime, user, simulation_id,
                          "set_vehicle_enabled", vehicle_id=vehicle_id, enabled=True)


@router.post(_SIM + "/vehicles/{vehicle_id}/disable", **answers(VehicleChanged))
async def disable_vehicle(simulation_id: Id, vehicle_id: Id, user: CurrentUser,
                          runtime: RuntimeDep) -> dict[str, Any]:
    """vehicle_use (disabled); its waiting bookings move to other vehicles."""
    return await _operate(runtime, user, simulation_id,
                          "set_vehicle_enabled", vehicle_id=vehicle_id, enabled=False)


@router.post(_SIM + "/vehicles/{vehicle_id}/position", **answers(VehicleChanged))
async def push_position(simulation_id: Id, vehicle_id: Id, body: PositionPush,
                        user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """A driver app's GPS fix: vehicle_state_changed (new path), gps_data."""
    return await _operate(runtime, user, simulation_id, "push_position",
                          vehicle_id=vehicle_id, **body.model_dump(mode="json"))


@router.post(_SIM + "/nodes/{node_id}/status", **answers(NodeCompleted))
async def node_status(simulation_id: Id, node_id: Id, body: NodeStatusUpdate,
                      user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """A driver app at a node: node_status, or fail_to_board for a no-show."""
    return await _operate(runtime, user, simulation_id, "node_status", node_id=node_id,
                          action=body.action, vehicle_id=body.vehicle_id, note=body.driver_note)
