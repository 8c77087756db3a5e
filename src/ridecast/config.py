"""Settings: every ``RIDECAST_*`` environment variable, validated once at start-up."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./ridecast.db"


class Settings(BaseSettings):
    """The effective configuration of one ridecast process.

    Each field is read from ``RIDECAST_<FIELD>`` (upper case); ``ridecast config show``
    prints the values in force.
    """

    model_config = SettingsConfigDict(env_prefix="RIDECAST_", extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy async URL of the event log and accounts store "
        "(sqlite+aiosqlite:///path or postgresql+asyncpg://...).",
    )
    bus_url: str = Field(
        "memory://",
        description="Event bus between processes: memory:// (one process) or redis://host:port/db.",
    )
    token_ttl_s: int = Field(
        24 * 3600, gt=0, description="Lifetime of a websocket token, in seconds."
    )
    max_body_bytes: int = Field(
        1024 * 1024, gt=0, description="Largest accepted HTTP request body; larger is a 413."
    )
    max_batch_events: int = Field(
        1000, gt=0, description="Most events accepted in one POST .../events batch."
    )
    event_retention_s: int = Field(
        7 * 24 * 3600,
        gt=0,
        description="Events older than this are removed from the log (and can no longer be "
        "replayed with since= or after=).",
    )
    retention_interval_s: float = Field(
        300.0, gt=0, description="How often the retention sweep runs, in seconds."
    )
    group_commit_max_events: int = Field(
        2000, gt=0, description="Most events written to the log in one transaction."
    )
    simulation_cache_size: int = Field(
        10_000,
        gt=0,
        description="Most simulations (including ids found not to exist) whose owner and "
        "webhook settings each process caches; the least recently used are dropped first.",
    )
    simulation_cache_ttl_s: float = Field(
        5.0,
        gt=0,
        description="A cached simulation entry is re-read from the store after this many "
        "seconds, even if no change notice arrived over the bus.",
    )
    webhook_allow_private: bool = Field(
        False,
        description="Let webhooks reach loopback and private-range addresses "
        "(on in the demo and tests; link-local and metadata addresses stay refused).",
    )
    webhook_timeout_s: float = Field(10.0, gt=0, description="Total time-out of one delivery.")
    webhook_connect_timeout_s: float = Field(2.0, gt=0, description="Connect time-out.")
    webhook_retry_schedule_s: list[float] = Field(
        default_factory=lambda: [5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 10800.0],
        description="Delays before each retry of a failed delivery (JSON list of seconds); "
        "after the last one the delivery is marked failed.",
    )
    webhook_retry_jitter: float = Field(
        0.2, ge=0, le=1, description="Each retry delay is scaled by a random factor in "
        "[1 - jitter, 1 + jitter]."
    )
    webhook_disable_after_s: float = Field(
        24 * 3600.0,
        gt=0,
        description="An endpoint failing continuously for this long is disabled.",
    )
    webhook_concurrency_per_endpoint: int = Field(
        8, gt=0, description="Most deliveries in flight to one endpoint at once."
    )
    webhook_lease_s: float = Field(
        60.0, gt=0, description="A claimed delivery not finished in this time is reclaimed."
    )
    webhook_workers: bool = Field(
        True, description="Run webhook delivery in the serve process (off when `ridecast worker` "
        "processes do it)."
    )
    ws_ping_interval_s: float = Field(
        20.0, gt=0, description="Websocket ping interval; a peer that misses a pong is closed."
    )
    ws_port: int | None = Field(
        None, ge=0, le=65535,
        description="Also serve the websocket paths on this port, with a dedicated listener "
        "(faster per frame than the HTTP port's ASGI path); unset: HTTP port only.",
    )
    tls_cert_file: str | None = Field(
        None, description="PEM certificate: serve https and wss on every port "
        "(also `ridecast serve --tls-cert`)."
    )
    tls_key_file: str | None = Field(
        None, description="PEM private key of the certificate (also `--tls-key`)."
    )
    ws_host: str = Field("127.0.0.1", description="Address of the dedicated websocket listener.")
    ws_send_queue: int = Field(
        1024, gt=0, description="Frames buffered per websocket connection before it is closed "
        "as a slow consumer."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level."
    )
    tile_url: str = Field(
        "https://tile.openstreetmap.org/{z}/{x}/{y}.png",
        description="Map tile URL template of the dashboard.",
    )
    tile_attribution: str = Field(
        "© OpenStreetMap contributors",
        description="Attribution shown on the dashboard map for the tiles (plain text).",
    )

    @field_validator("webhook_retry_schedule_s")
    @classmethod
    def _schedule_not_empty(cls, value: list[float]) -> list[float]:
        if any(delay < 0 for delay in value):
            raise ValueError("retry delays must be >= 0")
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings()
