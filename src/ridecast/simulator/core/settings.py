"""The simulator's settings, read from a simulation's ``data.simulator`` object.

Every field has a default, and the defaults are chosen so that one simulated hour with a dozen
vehicles produces all 18 event types: some riders reject offers or let them expire, some do not
show up, some cancel or change their passenger count, and vehicles take breaks (``vehicle_use``).
``data.performance_tracker_enabled`` (outside ``simulator``, where the interface names it)
switches ``vehicle_arrival`` and ``vehicle_arrival_grouped`` on; absent means on, so that a demo
shows the whole interface.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ...errors import BadRequest

#: Longest wait for a pickup, of the settings and of a booking's own ``max_wait_s``: every
#: simulated time the engine computes stays a finite, representable timestamp.
MAX_WAIT_S = 7 * 86400.0
#: Shortest period of a timer that repeats for every vehicle (GPS, states, arrivals): a
#: shorter one would flood the run with events.
MIN_INTERVAL_S = 1.0
#: Simulated start times the engine accepts: a run's every timestamp (the start plus its
#: duration, waits and timeouts) stays inside what a datetime can hold.
START_TS_MIN = datetime(1900, 1, 1, tzinfo=UTC)
START_TS_MAX = datetime(9000, 1, 1, tzinfo=UTC)

#: Built-in values of ``network`` (bundled networks and the straight-line model).
NETWORKS = frozenset({"straight", "gothenburg"})
#: A user network's name (``ridecast network import FILE NAME``): never a path.
NETWORK_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: Where imported networks live unless set: ``networks/`` in the default data directory.
DEFAULT_NETWORK_DIR = Path("ridecast-data") / "networks"


def network_dir() -> Path:
    """Where ``ridecast network import`` writes and simulations look: ``$RIDECAST_NETWORK_DIR``,
    else ``./ridecast-data/networks`` (the default data directory's)."""
    return Path(os.environ.get("RIDECAST_NETWORK_DIR") or DEFAULT_NETWORK_DIR)


def user_network_path(name: str) -> Path | None:
    """The file of an imported network, if ``name`` is a valid name and it exists."""
    if name in NETWORKS or not NETWORK_NAME.fullmatch(name):
        return None
    path = network_dir() / f"{name}.npz"
    return path if path.is_file() else None


class BBox(BaseModel):
    """A bounding box of the service area."""

    model_config = ConfigDict(extra="forbid")

    min_lat: float = Field(ge=-90, le=90)
    min_lon: float = Field(ge=-180, le=180)
    max_lat: float = Field(ge=-90, le=90)
    max_lon: float = Field(ge=-180, le=180)

    @model_validator(mode="after")
    def _ordered(self) -> BBox:
        if self.min_lat >= self.max_lat or self.min_lon >= self.max_lon:
            raise ValueError("min_lat < max_lat and min_lon < max_lon are required")
        return self


class Circle(BaseModel):
    """A service area given as a centre and a radius."""

    model_config = ConfigDict(extra="forbid")

    lat: float = Field(ge=-85, le=85)
    lon: float = Field(ge=-180, le=180)
    radius_m: float = Field(gt=0, le=100_000)


class HotSpot(BaseModel):
    """A zone of concentrated demand: a disc and its weight among the hot spots."""

    model_config = ConfigDict(extra="forbid")

    lat: float = Field(ge=-85, le=85)
    lon: float = Field(ge=-180, le=180)
    radius_m: float = Field(gt=0, le=100_000)
    weight: float = Field(1.0, gt=0, le=1_000_000)


#: Demand by hour of the simulated clock (relative weights, mean 1): a night trough, a
#: morning peak at 7-9 and an evening peak at 16-18, the usual shape of urban ride demand.
DEFAULT_DEMAND_PROFILE: tuple[float, ...] = (
    0.32, 0.22, 0.16, 0.13, 0.16, 0.38, 0.86, 1.72, 1.94, 1.30, 1.03, 1.08,
    1.22, 1.16, 1.16, 1.35, 1.84, 2.00, 1.62, 1.30, 1.03, 0.86, 0.67, 0.49,
)


#: Congestion by hour of the simulated clock: road-network travel times are the free-flow
#: times x this (>= 1): free at night, peaks at 7-9 and 16-18.
DEFAULT_CONGESTION_PROFILE: tuple[float, ...] = (
    1.00, 1.00, 1.00, 1.00, 1.00, 1.05, 1.20, 1.45, 1.50, 1.30, 1.15, 1.15,
    1.20, 1.15, 1.15, 1.25, 1.45, 1.55, 1.40, 1.20, 1.10, 1.05, 1.00, 1.00,
)


class SimulatorSettings(BaseModel):
    """What the simulator simulates; the ``data.simulator`` object of a simulation."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(1, ge=-(2**63), le=2**63 - 1,
                      description="Seed of every random stream; same seed, same events.")
    vehicles: int = Field(12, ge=0, le=10_000, description="Fleet size.")
    capacity: int = Field(4, ge=1, le=50, description="Seats per vehicle.")
    bookings_per_hour: float = Field(
        90.0, ge=0, le=1_000_000,
        description="Demand: booking requests per simulated hour, on average over a day "
        "(demand_profile shapes it by hour).",
    )
    demand_profile: list[float] = Field(
        default_factory=lambda: list(DEFAULT_DEMAND_PROFILE), min_length=24, max_length=24,
        description="24 relative weights, one per hour of the simulated clock (start_ts's "
        "offset); the rate in hour h is bookings_per_hour x w[h] / mean(w). Default: night "
        "trough, peaks at 7-9 and 16-18. All equal = flat.",
    )
    demand_hot_spots: list[HotSpot] | None = Field(
        None, max_length=100,
        description="Zones of concentrated demand ({lat, lon, radius_m, weight}); default: "
        "three placed in the area from the seed (weights 3, 2, 1, radius 15% of the area's).",
    )
    demand_background_share: float = Field(
        0.5, ge=0, le=1,
        description="Share of request points drawn uniformly in the area; the rest come from "
        "the hot spots.",
    )
    duration_s: float = Field(
        3600.0, gt=0, le=30 * 86400,
        description="Demand is generated for this long; the run then drains open routes.",
    )
    speed: float | Literal["max"] = Field(
        1.0, description="1 = real time (current_sim_ts is now); k = k times faster; "
        "'max' = as fast as possible.",
    )
    start_ts: datetime | None = Field(
        None, description="Simulated start time (with offset); default: when started."
    )
    area: BBox | Circle = Field(
        default_factory=lambda: Circle(lat=57.705, lon=11.963, radius_m=5000.0),
        description="Service area: {min_lat,min_lon,max_lat,max_lon} or {lat,lon,radius_m}.",
    )
    network: str | None = Field(
        None, description="Road network: 'gothenburg' (bundled, OpenStreetMap), the name of "
        "one imported with 'ridecast network import', or 'straight' (straight lines at "
        "vehicle_speed_kmh); default: 'gothenburg' when the area's centre lies inside it, "
        "else 'straight'.",
    )
    vehicle_speed_kmh: float = Field(30.0, gt=0, le=200, description="Straight-line speed.")
    congestion_profile: list[float] = Field(
        default_factory=lambda: list(DEFAULT_CONGESTION_PROFILE), min_length=24, max_length=24,
        description="Road network only: 24 factors (>= 1, <= 10), one per hour of the "
        "simulated clock; travel times are free-flow times x the factor of the hour. "
        "Default: 1 at night, 1.5 at 8, 1.55 at 17.",
    )
    congestion_noise: float = Field(
        0.05, ge=0, le=1,
        description="Sigma of a seeded log-normal noise on each hour's congestion factor "
        "(the result is kept >= 1).",
    )
    dwell_s: float = Field(20.0, ge=0, le=600, description="Stop time at each node.")
    max_wait_s: float = Field(
        600.0, gt=0, le=MAX_WAIT_S, description="Latest pickup = request time + max_wait_s."
    )
    max_detour_factor: float = Field(
        1.8, ge=1.0, le=10.0, description="Ride time <= factor x direct time (+ dwell_s)."
    )
    min_trip_m: float = Field(500.0, ge=0, le=200_000, description="Shortest generated trip.")
    acceptance_probability: float = Field(
        0.95, ge=0, le=1,
        description="A simulated rider's chance to accept an offer whose wait and detour "
        "are within the 'full' thresholds below (with acceptance_model 'flat': any offer).",
    )
    acceptance_model: Literal["linear", "flat"] = Field(
        "linear", description="'linear': the chance falls linearly with the offered wait "
        "and detour between the thresholds below (as FleetPy's traveller models); 'flat': "
        "acceptance_probability whatever the offer.",
    )
    acceptance_wait_full_s: float = Field(
        300.0, ge=0, le=86400, description="Offered wait (s) up to which the chance is whole.")
    acceptance_wait_zero_s: float = Field(
        1200.0, ge=0, le=86400, description="Offered wait (s) from which no rider accepts.")
    acceptance_detour_full: float = Field(
        1.4, ge=1, le=10,
        description="Offered ride / direct drive up to which the chance is whole.")
    acceptance_detour_zero: float = Field(
        2.5, ge=1, le=10, description="Offered ride / direct drive from which no rider accepts.")
    expiry_share: float = Field(
        0.3, ge=0, le=1, description="Share of non-accepted offers left to expire."
    )
    offer_timeout_s: float = Field(60.0, gt=0, le=86400,
                                   description="An unanswered offer expires.")
    no_show_probability: float = Field(0.07, ge=0, le=1)
    cancellation_probability: float = Field(0.1, ge=0, le=1)
    demand_change_probability: float = Field(0.1, ge=0, le=1)
    vehicle_break_probability: float = Field(
        0.3, ge=0, le=1, description="Chance that a vehicle takes one break (disabled, then "
        "enabled: vehicle_use) during the run.",
    )
    break_duration_s: float = Field(600.0, gt=0, le=86400)
    gps_interval_s: float = Field(10.0, ge=MIN_INTERVAL_S, le=86400,
                                  description="GPS period of a moving vehicle.")
    gps_noise_m: float = Field(
        3.0, ge=0, le=50, description="GPS error (sigma; distance clipped at 3 sigma)."
    )
    snapshot_interval_s: float = Field(60.0, ge=MIN_INTERVAL_S, le=86400,
                                       description="vehicle_states period.")
    arrival_interval_s: float = Field(60.0, ge=MIN_INTERVAL_S, le=86400,
                                      description="vehicle_arrival period.")
    max_candidates: int = Field(
        64, ge=1, le=10_000,
        description="Scheduler: most vehicles tried per booking, earliest pickup first."
    )
    rebalance_interval_s: float = Field(
        300.0, ge=0, le=86400,
        description="Every this many seconds (while demand comes), idle vehicles drive "
        "towards the grid cells of recent requests short of their share of the idle fleet "
        "(rebalance_window_s, rebalance_unserved_weight, rebalance_cell_m); 0 = never.",
    )
    rebalance_window_s: float = Field(
        1800.0, gt=0, le=86400,
        description="Rebalancing follows the requests of this many seconds before.")
    rebalance_unserved_weight: float = Field(
        2.0, ge=0, le=100,
        description="A request that found no vehicle weighs this many served ones.")
    rebalance_cell_m: float = Field(
        600.0, ge=50, le=100_000, description="Rebalancing's grid: cells this wide.")
    reoptimise_interval_s: float = Field(
        60.0, ge=0, le=86400,
        description="Every this many seconds, bookings not yet picked up move to a cheaper "
        "place in the fleet's routes when there is one, keeping every promise "
        "(reoptimise.py); 0 = never.",
    )
    reoptimise_max_bookings: int = Field(
        32, ge=1, le=10_000, description="Most bookings looked at in one re-optimisation "
        "round (taken in turn).")
    retry_s: float = Field(
        120.0, ge=0, le=86400,
        description="A simulated rider's request that finds no vehicle is tried again "
        "every retry_interval_s for this long before its no_offer; 0 = answered at once.",
    )
    retry_interval_s: float = Field(
        30.0, ge=MIN_INTERVAL_S, le=86400,
        description="How often a request waiting in the retry queue is tried again.")
    kpi_warmup_s: float = Field(
        900.0, ge=0, le=30 * 86400,
        description="KPIs in 'measured' leave out bookings requested, and driving done, "
        "before this many simulated seconds (the fleet is still filling up).",
    )
    performance_tracker_enabled: bool = Field(
        True, description="Copied from data.performance_tracker_enabled."
    )

    @property
    def realtime_factor(self) -> float | None:
        """Sim seconds per wall second, or None for 'max'."""
        return None if self.speed == "max" else float(self.speed)

    @field_validator("start_ts")
    @classmethod
    def _start_in_range(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is not None and not (
                START_TS_MIN <= value.astimezone(UTC) < START_TS_MAX):
            raise ValueError(f"start_ts must be from {START_TS_MIN.date()} to before "
                             f"{START_TS_MAX.date()}")
        return value

    @field_validator("congestion_profile")
    @classmethod
    def _congestion_in_range(cls, value: list[float]) -> list[float]:
        if any(not (0 <= f <= 10) for f in value):
            raise ValueError("congestion_profile needs 24 factors in [0, 10] (below 1 reads "
                             "as 1)")
        return value

    @model_validator(mode="after")
    def _speed_positive(self) -> SimulatorSettings:
        if self.speed != "max" and not (0 < self.speed <= 1_000_000):
            raise ValueError("speed must be > 0 or 'max'")
        if self.start_ts is not None and self.start_ts.tzinfo is None:
            raise ValueError("start_ts needs an offset")
        if (self.acceptance_wait_zero_s <= self.acceptance_wait_full_s
                or self.acceptance_detour_zero <= self.acceptance_detour_full):
            raise ValueError("acceptance thresholds: each 'zero' must be above its 'full'")
        # A timer period of a fraction of a second would make the engine spin on it.
        for name in ("rebalance_interval_s", "reoptimise_interval_s"):
            if 0 < getattr(self, name) < MIN_INTERVAL_S:
                raise ValueError(f"{name} must be 0 (never) or at least {MIN_INTERVAL_S:g} s")
        if any(not (0 <= w <= 1e6) for w in self.demand_profile) or sum(self.demand_profile) <= 0:
            raise ValueError("demand_profile needs 24 weights in [0, 1e6], not all 0")
        if (self.network is not None and self.network not in NETWORKS
                and user_network_path(self.network) is None):
            raise ValueError(f"network must be one of {sorted(NETWORKS)} or the name of a "
                             "network imported with 'ridecast network import'")
        return self

    def area_centre(self) -> tuple[float, float]:
        area = self.area
        if isinstance(area, Circle):
            return area.lat, area.lon
        return (area.min_lat + area.max_lat) / 2, (area.min_lon + area.max_lon) / 2


def read_settings(data: dict[str, Any] | None) -> SimulatorSettings:
    """Build the settings from a simulation's ``data``; a bad value is a 400 naming it."""
    data = data or {}
    raw = data.get("simulator", {})
    if not isinstance(raw, dict):
        raise BadRequest(
            "data.simulator must be an object", code="invalid_simulation_data"
        )
    merged = dict(raw)
    tracker = data.get("performance_tracker_enabled")
    if tracker is not None:
        merged["performance_tracker_enabled"] = tracker
    try:
        return SimulatorSettings.model_validate(merged)
    except ValidationError as exc:
        details = [
            {"loc": ["data", "simulator", *map(str, err["loc"])], "msg": err["msg"]}
            for err in exc.errors(include_url=False, include_context=False)
        ]
        raise BadRequest(
            "data.simulator is invalid", code="invalid_simulation_data", details=details
        ) from exc
