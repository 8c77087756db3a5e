"""Settings: every ``RIDECAST_*`` environment variable, validated once at start-up."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./ridecast-data/ridecast.db"
SUPPORTED_DATABASE_SCHEMES = ("sqlite+aiosqlite", "postgresql+asyncpg")
"""The stores ridecast runs on: SQLite through aiosqlite, PostgreSQL through asyncpg."""


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
    database_pool_size: int = Field(
        5, ge=1, le=1000, description="Connections to the store each process keeps open "
        "for requests, workers and the event log's writer (which keeps one).",
    )
    database_pool_overflow: int = Field(
        10, ge=0, le=1000, description="Connections opened beyond RIDECAST_DATABASE_POOL_SIZE "
        "at busy times, and closed again when returned.",
    )
    database_pool_timeout_s: float = Field(
        10.0, gt=0, le=300, description="Longest a request waits for a store connection "
        "when all of them are in use; then it answers 503 service_unavailable with "
        "Retry-After.",
    )
    sqlite_synchronous: Literal["normal", "full"] = Field(
        "normal", description="SQLite's synchronous mode (WAL). normal: a killed process "
        "loses nothing committed, but a power loss or an OS crash can lose the events "
        "acknowledged since the last WAL sync; full: each commit is on disk before its 201, "
        "at a cost on ingest (docs/deployment.md).",
    )
    bus_url: str = Field(
        "memory://",
        description="Event bus between processes: memory:// (one process) or redis://host:port/db.",
    )
    bus_prefix: str = Field(
        "ridecast", min_length=1, description="Prefix of the Redis keys of the bus "
        "(one stream, <prefix>:bus); processes of one cluster share it.",
    )
    bus_stream_maxlen: int = Field(
        100_000, gt=0, description="The Redis stream is trimmed to about this many entries; "
        "a node that falls further behind catches up from the event log.",
    )
    bus_catch_up_interval_s: float = Field(
        1.0, gt=0, description="How often each node compares the log's newest event id with "
        "the last it delivered and fills any gap from the log (Redis bus only).",
    )
    bus_timeout_s: float = Field(
        2.0, gt=0, le=60, description="Longest wait for Redis to answer one publish or ping; "
        "beyond it the publish fails (the event is committed and reaches consumers from the "
        "log) and the bus counts as unreachable (Redis bus only).",
    )
    outage_log_interval_s: float = Field(
        30.0, gt=0, description="While Redis or the database is unreachable, a node logs one "
        "line when the link breaks, one when it is back, and between the two a summary of the "
        "failures (how many, the last) at most this often, in seconds.",
    )
    ready_timeout_s: float = Field(
        1.0, gt=0, le=30, description="Longest wait of /readyz for each of its checks (store, "
        "bus), run side by side; a part that does not answer in time reads as unavailable, so "
        "a load balancer's probe gets its 503 within about this time.",
    )
    shutdown_timeout_s: float = Field(
        20.0, gt=0, le=600, description="Longest a stop (SIGTERM) waits for the process's "
        "parts to stop after its connections have closed; past it the process logs what is "
        "still running and exits anyway. Nothing acknowledged is lost: an event is "
        "acknowledged once committed, and a simulator run is handed over first.",
    )
    token_ttl_s: int = Field(
        24 * 3600, gt=0, description="Lifetime of a websocket token, in seconds."
    )
    max_body_bytes: int = Field(
        1024 * 1024, gt=0, description="Largest accepted HTTP request body; larger is a 413."
    )
    max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest request line plus headers of one HTTP "
        "request, in bytes; larger is answered 431 headers_too_large and the connection "
        "closed.",
    )
    http_header_timeout_s: float = Field(
        10.0, gt=0, description="Time from the first byte of an HTTP request to the end of "
        "its headers; a request whose headers are not complete by then has its connection "
        "closed.",
    )
    http_body_timeout_s: float = Field(
        60.0, gt=0, description="Time from the end of an HTTP request's headers to the end of "
        "its body; a request whose body is not complete by then has its connection closed.",
    )
    http_idle_timeout_s: float = Field(
        5.0, gt=0, description="An HTTP connection with no request in progress (new, or kept "
        "alive after a response) that begins none within this time is closed; so is a TLS "
        "connection whose handshake has not ended within it (both ports).",
    )
    direct_ingest: bool = Field(
        True, description="Serve plain POST .../events requests (a Content-Length body within "
        "RIDECAST_MAX_BODY_BYTES) without uvicorn's own request cycle, answered in one write "
        "(ridecast serve and demo); false sends every request through uvicorn's cycle.",
    )
    max_json_depth: int = Field(
        32, gt=0, le=200, description="Deepest nesting of objects and arrays accepted in a JSON "
        "body (simulation data, templates, events); deeper is a 400 json_limit_exceeded.",
    )
    max_json_string: int = Field(
        65536, gt=0, description="Longest string (or object key) accepted in a JSON body, in "
        "characters; longer is a 400 json_limit_exceeded.",
    )
    max_json_items: int = Field(
        100_000, gt=0, description="Most values (objects, arrays, strings, numbers) in one JSON "
        "body; more is a 400 json_limit_exceeded.",
    )
    max_batch_events: int = Field(
        1000, gt=0, description="Most events accepted in one POST .../events batch."
    )
    max_page_bytes: int = Field(
        4 * 1024 * 1024, gt=0, description="Byte budget of one page of a listing whose items "
        "can be large (event history, simulations, templates, the webhook delivery log): a "
        "page stops before the item that would pass it and meta.next_after says where to go "
        "on; an item larger than the budget still comes, alone on its page.",
    )
    auth_failures_per_user: int = Field(
        20, gt=0, description="Failed authentications of one user name from one client "
        "address per window; beyond it, that name's requests from that address are answered "
        "429 with Retry-After until the window ends (the name from other addresses is not).",
    )
    auth_failures_per_address: int = Field(
        100, gt=0, description="Failed authentications from one client address per window "
        "(counted cluster-wide with a Redis bus, like _PER_USER); beyond it, that address's "
        "requests are answered 429 with Retry-After.",
    )
    auth_failure_window_s: float = Field(
        60.0, gt=0, description="Length of the window of RIDECAST_AUTH_FAILURES_PER_*, "
        "in seconds.",
    )
    simulator_max_finished_runs: int = Field(
        100, ge=0, description="Finished or stopped simulator runs kept in memory with their "
        "KPIs; beyond it the oldest are dropped (their status reads idle again).",
    )
    rate_limit_per_key: float = Field(
        20_000.0, ge=0, description="Requests per second one API key may send on average "
        "(in the whole cluster with a Redis bus; 0: no limit); beyond it (and the burst) "
        "requests are answered 429 with Retry-After.",
    )
    rate_limit_burst: float = Field(
        40_000.0, gt=0, description="Requests one API key may send at once above its rate.",
    )
    limits_lease_s: float = Field(
        10.0, gt=0, le=300, description="With a Redis bus, each node's lease on the stream "
        "counts it holds in Redis, renewed every third of it: the streams of a node that dies "
        "are given back to their user's and token's limits within this time.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list, description="Addresses or networks (JSON list, e.g. "
        '["10.0.0.5", "10.1.0.0/16"]) of the reverse proxies whose X-Forwarded-For and '
        "X-Forwarded-Proto are believed; the client address of anyone else is the socket's. "
        "Default none: forwarding headers are ignored.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list, description="Web origins (JSON list, e.g. "
        '["https://ops.example.com"]) whose pages may send state-changing requests (POST, '
        "PATCH, PUT, DELETE) besides the server's own: a request whose Origin header is "
        "neither gets 403 cross_origin_refused. Default none.",
    )
    ws_max_streams_per_user: int = Field(
        2000, gt=0, description="Open websocket streams of one user (in the whole cluster "
        "with a Redis bus); one more is closed with 4102 too_many_streams.",
    )
    ws_max_streams_per_token: int = Field(
        200, gt=0, description="Open websocket streams opened with one token (in the whole "
        "cluster with a Redis bus); one more is closed with 4102 too_many_streams.",
    )
    revocation_poll_s: float = Field(
        0.5, gt=0, le=60, description="How often each process checks the store for revoked "
        "users, keys and tokens; a revocation made in another process (the CLI, another "
        "node) takes effect, open streams included, within this time.",
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
    ingest_max_pending_events: int = Field(
        50_000, gt=0, description="Most events accepted and waiting to be written to the log; "
        "beyond it, ingest answers 503 ingest_saturated with Retry-After (nothing stored).",
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
        "seconds, even if no change notice arrived over the bus. An entry in use is re-read "
        "in the background once it is half that old, so steady ingest never waits for the "
        "read; requests that miss together share one read.",
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
        60.0, gt=0, description="A claimed delivery not finished in this time is reclaimed. "
        "Must be longer than RIDECAST_WEBHOOK_TIMEOUT_S: a request is written only while its "
        "lease outlasts it."
    )
    webhook_workers: bool = Field(
        True, description="Run webhook delivery in the serve process (off when `ridecast worker` "
        "processes do it)."
    )
    webhook_poll_interval_s: float = Field(
        1.0, gt=0, description="How often a process that delivers webhooks looks for "
        "deliveries nothing announced: retries another process scheduled coming due, leases "
        "that ran out, rows of another process when neither the bus nor the outbox watch "
        "tells it. A retry this process scheduled wakes it when it is due, not at the poll."
    )
    webhook_watch_interval_s: float = Field(
        0.01, ge=0, description="How often a `ridecast worker` without `RIDECAST_BUS_URL` reads "
        "the outbox's newest delivery id to hear of new deliveries (0: not at all, then it "
        "finds them by its poll, `RIDECAST_WEBHOOK_POLL_INTERVAL_S`)."
    )
    webhook_unit_rows: int = Field(
        64, gt=0, le=100_000, description="Most deliveries of one ordered lane (one simulation) "
        "a worker claims at once and sends one after the other."
    )
    webhook_chunk_rows: int = Field(
        256, gt=0, le=100_000, description="Most deliveries of one unordered chunk (one URL) a "
        "worker claims at once; a running chunk asks for more when half of it is left."
    )
    webhook_max_in_memory: int = Field(
        8192, gt=0, le=1_000_000, description="Most deliveries one process holds claimed and "
        "unsent; it claims no more until some are done."
    )
    webhook_body_cache_bytes: int = Field(
        32 * 1024 * 1024, ge=0, description="Bytes of event bodies a process keeps for the "
        "first attempt of the deliveries it appended (then no read back from the log); the "
        "oldest are dropped first."
    )
    webhook_maintenance_interval_s: float = Field(
        5.0, gt=0, description="How often a process that delivers webhooks updates the "
        "queue-depth and backlog gauges and checks whether retention is due (less often "
        "once reading the backlog takes over 5% of this time)."
    )
    webhook_backlog_metric_sims: int = Field(
        100, ge=0, le=10_000, description="The simulations with the oldest undelivered events "
        "that /metrics shows a webhook backlog and age for (one label each; the rest are in "
        "the delivery log's meta)."
    )
    webhook_claim_hold_s: float = Field(
        2.0, gt=0, description="PostgreSQL: how long the server waits for a worker stopped "
        "inside one of its transactions on the outbox (a claim, a record, a renewal, a "
        "release) before it ends that transaction, releasing its locks (a stalled worker "
        "then holds only its leases); every process that delivers webhooks also ends, this "
        "often, the sessions of the same database and role that have waited this long for "
        "their client in the middle of a statement after writing (docs/webhooks.md)."
    )
    simulator_lease_s: float = Field(
        15.0, gt=0, description="Lease of a node on the simulator runs it owns, renewed every "
        "third of it; a running or paused run whose owner stops renewing (killed, cut off) "
        "is taken over by another node after this long (a clean shutdown hands it over at "
        "once)."
    )
    simulator_forward_timeout_s: float = Field(
        5.0, gt=0, description="How long a node waits for the owner of a simulator run to "
        "answer a forwarded command before a 503 simulator_owner_unreachable."
    )
    # Quotas per organisation, counted for the whole cluster (docs/simulator.md, "Quotas").
    quota_runs_per_org: int = Field(
        10, ge=1, le=10_000, description="Simulator runs (running or paused) one organisation "
        "may have at once; one more start is a 429 quota_runs. A stopped or finished run, or "
        "one whose node died and was not taken over, gives its slot back.",
    )
    quota_vehicles_per_run: int = Field(
        10_000, ge=0, le=10_000, description="Most vehicles (data.simulator.vehicles) one run "
        "may start with; more is a 403 quota_vehicles_per_run.",
    )
    quota_vehicles_per_org: int = Field(
        30_000, ge=0, le=100_000_000, description="Most vehicles of one organisation's "
        "running and paused runs together; a start beyond it is a 429 quota_vehicles.",
    )
    quota_events_per_s_per_org: float = Field(
        100_000.0, gt=0, le=10_000_000, description="Simulator events one organisation's runs "
        "may publish per second together (a burst of one second's worth above it); a run "
        "over it waits (its simulated time slows down), it drops nothing.",
    )
    quota_simulations_per_org: int = Field(
        10_000, ge=1, le=100_000_000, description="Simulations (not deleted) one "
        "organisation may hold; one more is a 403 quota_simulations.",
    )
    quota_templates_per_org: int = Field(
        1_000, ge=1, le=100_000_000, description="Simulation templates (not deleted) one "
        "organisation may hold; one more is a 403 quota_templates.",
    )
    quota_event_bytes_per_org: int = Field(
        5_000_000_000, ge=1, le=2**62, description="Bytes of stored event bodies (ingested "
        "and simulator events) one organisation may hold in the event log; events beyond it "
        "are refused with 403 quota_event_bytes (a run stops with that error). Retention "
        "gives bytes back (a deleted simulation's events count until it removes them).",
    )
    quota_recount_s: float = Field(
        300.0, gt=0, le=86_400, description="How often the stored event bytes of every "
        "organisation are recounted from the store (by one node of a cluster; also at "
        "start-up), correcting the running count for retention and for writes that failed "
        "after being counted. A recount reads every event's size, so a longer interval "
        "costs a busy store less.",
    )
    quota_metrics_orgs: int = Field(
        50, ge=1, le=10_000, description="Organisations shown by name (their id) in the "
        "ridecast_quota_usage gauges, the largest users first; the rest are summed under "
        "organisation=\"other\", so the label's cardinality stays bounded.",
    )
    simulator_host: bool = Field(
        True, description="Run simulator runs in this `ridecast serve` process (its engine "
        "processes compute them). false: this node runs none; it hands each start to a "
        "`ridecast simulator` process of the cluster and forwards every command to the "
        "process that owns the run, so that API nodes compute no engine (needs the Redis "
        "bus)."
    )
    simulator_engine_processes: int | None = Field(
        None, ge=0, description="Engine processes a serving process starts (when runs need "
        "them) to compute its simulator runs, each hosting several runs; unset: one per usable "
        "CPU but one (at least one; its CPU set cut to its cgroup's CPU quota, see "
        "deployment.md), so that requests, streams and publishing keep a CPU while "
        "runs at speed \"max\" take the others. 0 computes runs on the serving event loop "
        "itself (tests and debugging only: a big run then slows every request of the "
        "process)."
    )
    simulator_slice_ms: float = Field(
        20.0, gt=0, le=1000, description="CPU time one step of a run at speed \"max\" may "
        "take in its engine process; the process serves such steps in turns between "
        "organisations and runs, real-time runs' steps and operations first."
    )
    simulator_engine_recycle_mb: float = Field(
        32.0, ge=0, description="An engine process left with no run whose resident memory "
        "grew by more than this many MiB since it started is ended (the next run starts a "
        "fresh one), so that memory a big run took goes back to the system."
    )
    simulator_engine_idle_s: float = Field(
        10.0, ge=0, description="An engine process with no run for this long is ended (a "
        "server with no run has no engine process)."
    )
    simulator_engine_nice: int = Field(
        10, ge=0, le=19, description="How much engine processes lower their own CPU priority, "
        "so that on a busy machine requests, streams and publishing get the CPU first."
    )
    simulator_publish_share: float = Field(
        0.5, gt=0, le=1, description="Most of a serving process's time that publishing the "
        "events of its runs at speed \"max\" may take (in turns, one batch at a time); the "
        "rest stays for requests, streams and real-time runs."
    )
    simulator_snapshot_every_s: float = Field(
        900.0, ge=0, le=86_400, description="Simulated seconds between two snapshots of a "
        "running simulator run's engine (0: never by time); a takeover or restart loads the "
        "newest and replays only the journal after it."
    )
    simulator_snapshot_every_events: int = Field(
        200_000, ge=0, le=100_000_000, description="Also take a snapshot once a run has "
        "produced this many events since its last one (0: never by count)."
    )
    simulator_snapshot_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024, description="Largest snapshot "
        "stored, in bytes (compressed); a bigger one is skipped with a warning, and a "
        "takeover replays from the previous snapshot or the run's start."
    )
    simulator_snapshot_keep: int = Field(
        2, ge=1, le=100, description="Snapshots kept per run (the newest); older ones are "
        "deleted when a new one is stored."
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
    ws_send_queue_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Bytes of frames buffered per websocket connection "
        "(on top of RIDECAST_WS_SEND_QUEUE frames) before it is closed with 4100 "
        "slow_consumer; a stream holds at most this plus one bus batch.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level. At info, `ridecast serve` prints at start only the "
        "store it uses and its URLs; debug adds uvicorn's and alembic's start-up lines."
    )
    access_log: bool = Field(
        False, description="Log one line per HTTP request (uvicorn's access log, at info): off "
        "by default, as in gunicorn, since writing it costs more per request than ingest "
        "itself; true turns it on for `serve` and `demo` (RIDECAST_LOG_LEVEL info or debug).",
    )
    tile_url: str = Field(
        "https://tile.openstreetmap.org/{z}/{x}/{y}.png",
        description="Map tile URL template of the dashboard.",
    )
    tile_attribution: str = Field(
        "© OpenStreetMap contributors",
        description="Attribution shown on the dashboard map for the tiles (plain text).",
    )
    map_roads: Literal["auto", "always", "never"] = Field(
        "auto", description="When the dashboard map draws the bundled road network's streets "
        "(OpenStreetMap data, ODbL, credited on the map) as its base layer: auto = when no "
        "tile loads (offline, or RIDECAST_TILE_URL empty), always = under the tiles too, "
        "never.",
    )

    @model_validator(mode="after")
    def _lease_outlasts_a_send(self) -> Settings:
        # A send starts only while its lease outlasts its time-out (docs/webhooks.md, "Two
        # requests in flight"): with a shorter lease no send could ever start.
        if self.webhook_lease_s <= self.webhook_timeout_s:
            raise ValueError(
                f"RIDECAST_WEBHOOK_LEASE_S ({self.webhook_lease_s}) must be longer than "
                f"RIDECAST_WEBHOOK_TIMEOUT_S ({self.webhook_timeout_s}): a delivery is sent "
                "only while its lease outlasts the request's time-out")
        return self

    @field_validator("database_url")
    @classmethod
    def _supported_store(cls, value: str) -> str:
        scheme = value.partition("://")[0].lower()
        if scheme not in SUPPORTED_DATABASE_SCHEMES:
            raise ValueError(
                f"the scheme {scheme!r} is not supported; use one of "
                + ", ".join(f"{s}://" for s in SUPPORTED_DATABASE_SCHEMES)
                + " (e.g. sqlite+aiosqlite:///./ridecast.db, "
                "postgresql+asyncpg://user@host/db)")
        return value

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
