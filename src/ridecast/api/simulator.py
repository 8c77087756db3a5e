"""Routes of the built-in simulator and of the operations that drive a simulation.

Control: ``POST simulation/{id}/simulator/start|pause|resume|stop``, ``GET simulation/{id}/
simulator``. Operations (need a running or paused simulator): bookings and their
cancellation, offer answers, vehicle enable/disable and GPS position, a driver app's node
status. Each answers with the changed objects and ``published``, the message types of the
events it caused, in order; a refused operation publishes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import status
from pydantic import BaseModel, ConfigDict, Field

from ..bus import BusMessage, SimulationChanged
from ..runtime import Runtime
from ..simulator.engine import Engine
from ..simulator.manager import SimulatorManager
from ..simulator.operations import Result
from ..simulator.settings import read_settings
from .deps import CurrentUser, RuntimeDep
from .jsonlimits import INT64_MAX, INT64_MIN
from .params import Id
from .routing import SlashRouter

router = SlashRouter(tags=["simulator"])

COMPONENT = "simulator"
_SIM = "/api/v2/simulation/{simulation_id}"


class BookingCreate(BaseModel):
    """Body of ``POST simulation/{id}/bookings``: a rider app's request."""

    model_config = ConfigDict(extra="forbid")

    pickup_lat: float = Field(ge=-90, le=90)
    pickup_lon: float = Field(ge=-180, le=180)
    dropoff_lat: float = Field(ge=-90, le=90)
    dropoff_lon: float = Field(ge=-180, le=180)
    passengers: int = Field(1, ge=1, le=100)
    max_wait_s: float | None = Field(None, gt=0, description="Default: the simulator's.")


class PositionPush(BaseModel):
    """Body of ``POST .../vehicles/{vehicle_id}/position``: a driver app's GPS fix."""

    model_config = ConfigDict(extra="forbid")

    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    bearing: float | None = Field(None, ge=0, lt=360)
    speed: float | None = Field(None, ge=0, description="m/s")


class NodeStatusUpdate(BaseModel):
    """Body of ``POST .../nodes/{node_id}/status``: what the driver did at the node."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["pickup_success", "dropoff_success", "no_show"]
    vehicle_id: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX,
                                   description="When given, must own the node.")
    driver_note: str | None = Field(None, max_length=2000)


def manager_of(runtime: Runtime) -> SimulatorManager:
    manager: SimulatorManager = runtime.components[COMPONENT]
    return manager


def install_simulator(runtime: Runtime) -> SimulatorManager:
    """Create the simulator manager on ``runtime``: events go through ingest; bad
    ``data.simulator`` is refused when set; a deleted simulation's simulator stops."""
    manager = SimulatorManager(runtime.ingest.submit, max_batch=runtime.ingest.max_batch,
                               max_finished=runtime.settings.simulator_max_finished_runs)
    runtime.components[COMPONENT] = manager

    async def check(data: dict[str, Any]) -> None:
        if "simulator" in data:
            read_settings(data)

    runtime.simulations.add_data_check(check)
    pending: set[Any] = set()

    def on_bus(messages: Sequence[BusMessage]) -> None:
        for message in messages:
            if isinstance(message, SimulationChanged) and message.deleted:
                task = asyncio.get_running_loop().create_task(manager.forget(message.simulation_id))
                pending.add(task)
                task.add_done_callback(pending.discard)

    runtime.bus.subscribe(on_bus)
    return manager


async def _control(runtime: Runtime, user: Any, simulation_id: int) -> SimulatorManager:
    await runtime.simulations.get(user, simulation_id)  # 404 unless visible
    return manager_of(runtime)


async def _operate(runtime: Runtime, user: Any, simulation_id: int,
                   op: Any) -> dict[str, Any]:
    manager = await _control(runtime, user, simulation_id)

    def run(engine: Engine) -> Result:
        body, events = op(engine)
        return {**body, "published": [e["message_type"] for e in events]}, events

    return await manager.operate(simulation_id, run)


@router.post(_SIM + "/simulator/start")
async def start(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """Start the simulator with the simulation's ``data.simulator`` settings."""
    record = await runtime.simulations.get(user, simulation_id)
    return await manager_of(runtime).start(simulation_id, record.data)


@router.post(_SIM + "/simulator/pause")
async def pause(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """Freeze simulated time; operations still apply at the frozen time."""
    return await (await _control(runtime, user, simulation_id)).pause(simulation_id)


@router.post(_SIM + "/simulator/resume")
async def resume(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """Continue a paused simulator."""
    return await (await _control(runtime, user, simulation_id)).resume(simulation_id)


@router.post(_SIM + "/simulator/stop")
async def stop(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """Stop the simulator for good (start begins a new run)."""
    return await (await _control(runtime, user, simulation_id)).stop(simulation_id)


@router.get(_SIM + "/simulator")
async def get_status(simulation_id: Id, user: CurrentUser,
                     runtime: RuntimeDep) -> dict[str, Any]:
    """``{"status", "sim_ts", "kpis", ...}``, live."""
    return (await _control(runtime, user, simulation_id)).status(simulation_id)


@router.post(_SIM + "/bookings", status_code=status.HTTP_201_CREATED)
async def create_booking(simulation_id: Id, body: BookingCreate, user: CurrentUser,
                         runtime: RuntimeDep) -> dict[str, Any]:
    """A booking: bookings, calc_started, then scheduler_result and offers, or no_offer."""
    return await _operate(runtime, user, simulation_id, lambda e: e.create_booking(
        body.pickup_lat, body.pickup_lon, body.dropoff_lat, body.dropoff_lon, body.passengers,
        body.max_wait_s))


@router.post(_SIM + "/bookings/{booking_id}/cancel")
async def cancel_booking(simulation_id: Id, booking_id: Id, user: CurrentUser,
                         runtime: RuntimeDep) -> dict[str, Any]:
    """bookings_cancellation, and the new route of the vehicle that was to serve it."""
    return await _operate(runtime, user, simulation_id, lambda e: e.cancel_booking(booking_id))


@router.post(_SIM + "/offers/{offer_id}/accept")
async def accept_offer(simulation_id: Id, offer_id: Id, user: CurrentUser,
                       runtime: RuntimeDep) -> dict[str, Any]:
    """offer_accepted, then assignment and vehicle_state_changed."""
    return await _operate(runtime, user, simulation_id, lambda e: e.accept_offer(offer_id))


@router.post(_SIM + "/offers/{offer_id}/reject")
async def reject_offer(simulation_id: Id, offer_id: Id, user: CurrentUser,
                       runtime: RuntimeDep) -> dict[str, Any]:
    """offer_rejected."""
    return await _operate(runtime, user, simulation_id, lambda e: e.reject_offer(offer_id))


@router.post(_SIM + "/vehicles/{vehicle_id}/enable")
async def enable_vehicle(simulation_id: Id, vehicle_id: Id, user: CurrentUser,
                         runtime: RuntimeDep) -> dict[str, Any]:
    """vehicle_use (enabled)."""
    return await _operate(runtime, user, simulation_id,
                          lambda e: e.set_vehicle_enabled(vehicle_id, True))


@router.post(_SIM + "/vehicles/{vehicle_id}/disable")
async def disable_vehicle(simulation_id: Id, vehicle_id: Id, user: CurrentUser,
                          runtime: RuntimeDep) -> dict[str, Any]:
    """vehicle_use (disabled); its waiting bookings move to other vehicles."""
    return await _operate(runtime, user, simulation_id,
                          lambda e: e.set_vehicle_enabled(vehicle_id, False))


@router.post(_SIM + "/vehicles/{vehicle_id}/position")
async def push_position(simulation_id: Id, vehicle_id: Id, body: PositionPush,
                        user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """A driver app's GPS fix: vehicle_state_changed (new path), gps_data."""
    return await _operate(runtime, user, simulation_id, lambda e: e.push_position(
        vehicle_id, body.lat, body.lon, body.bearing, body.speed))


@router.post(_SIM + "/nodes/{node_id}/status")
async def node_status(simulation_id: Id, node_id: Id, body: NodeStatusUpdate,
                      user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    """A driver app at a node: node_status, or fail_to_board for a no-show."""
    return await _operate(runtime, user, simulation_id, lambda e: e.node_status(
        node_id, body.action, body.vehicle_id, body.driver_note))
