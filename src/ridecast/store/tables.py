"""SQLAlchemy tables of the store: accounts, simulations, the event log, webhook outbox.

Times are unix seconds (float) so that SQLite and PostgreSQL compare them the same way.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Select,
    String,
    Table,
    Text,
    select,
    text,
    true,
)

from .outbox import ENDED_WHERE, LANE_ROWS_WHERE, LEASED_WHERE, LOOSE_PENDING_WHERE

metadata = MetaData()


def first_id_since(table: Table, cutoff: float) -> Select[tuple[Any]]:
    """The id of ``table``'s first row created at or after ``cutoff`` (unix s). Ids rise
    with creation, so every row created before ``cutoff`` has a lower id: the retention
    sweeps read their candidates below it, from the oldest, with no index on ``created_at``
    for every insert to keep up to date (migration 0011)."""
    return (select(table.c.id).where(table.c.created_at >= cutoff)
            .order_by(table.c.id).limit(1))


# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL wants a BIGINT identity.
BigId = BigInteger().with_variant(Integer(), "sqlite")

organisations = Table(
    "organisations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
)

users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("org_id", Integer, ForeignKey("organisations.id"), nullable=False),
    Column("is_admin", Boolean, nullable=False, default=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False, index=True),
    # SHA-256 of the key: keys are 256-bit random, so a fast hash is safe and lookups are O(1).
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
    # Recorded at most once a minute per key and process (``ridecast users keys``).
    Column("last_used_at", Float, nullable=True),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    # The API key the token was issued with: revoking that key revokes the token too.
    Column("key_id", Integer, nullable=True),
)

# One row. ``revocation_epoch`` goes up with every revocation (user or key): every process
# polls it cheaply and, when it moves, drops its auth caches and re-checks its open streams.
auth_state = Table(
    "auth_state",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("revocation_epoch", BigInteger, nullable=False),
)

simulation_templates = Table(
    "simulation_templates",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("data", JSON, nullable=False),
    Column("owner_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("org_id", Integer, ForeignKey("organisations.id"), nullable=False, index=True),
    Column("created_at", Float, nullable=False),
    # Bumped on every change; the ETag is derived from it (migration 0013).
    Column("version", Integer, nullable=False, default=1, server_default="1"),
    Column("updated_at", Float, nullable=True),
    Column("deleted_at", Float, nullable=True),
)

simulations = Table(
    "simulations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("data", JSON, nullable=False),
    Column("template_id", Integer, ForeignKey("simulation_templates.id"), nullable=True),
    Column("owner_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("org_id", Integer, ForeignKey("organisations.id"), nullable=False, index=True),
    # Bumped on every change; the ETag is derived from it.
    Column("version", Integer, nullable=False, default=1),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("deleted_at", Float, nullable=True),
    Column("webhook_disabled_at", Float, nullable=True),
    Column("webhook_disabled_reason", Text, nullable=True),
)

events = Table(
    "events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("simulation_id", Integer, nullable=False),
    Column("message_type", String(40), nullable=False),
    Column("created_at", Float, nullable=False),
    # The envelope as stored JSON (without event_id), serialised once at ingest.
    Column("body", LargeBinary, nullable=False),
    Index("ix_events_sim_id", "simulation_id", "id"),
    Index("ix_events_sim_type_id", "simulation_id", "message_type", "id"),
    # No index on created_at: retention reads the oldest ids instead (migration 0011).
    # Never reuse an id, even once retention has emptied the table: ids are cursors.
    sqlite_autoincrement=True,
)

# One row: the last event id handed out. The group commit takes its ids with
# ``UPDATE ... SET last_id = last_id + n RETURNING last_id`` inside its transaction, so the
# row lock orders writers across processes: ids are contiguous and in commit order, and a
# rolled-back transaction gives its ids back (docs/deployment.md, "Order").
event_counter = Table(
    "event_counter",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("last_id", BigInteger, nullable=False),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    # Not indexed: no query looks a delivery up by its event (migration 0011).
    Column("event_id", BigInteger, nullable=False),
    Column("simulation_id", Integer, nullable=False),
    Column("message_type", String(40), nullable=False),
    Column("url", Text, nullable=False),
    # pending | delivering | succeeded | failed | disabled
    Column("status", String(16), nullable=False),
    Column("attempt_count", Integer, nullable=False, default=0),
    Column("next_attempt_at", Float, nullable=False),
    Column("lease_until", Float, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("last_error", Text, nullable=True),
    # False: the simulation opted out of ordered delivery (data.messaging_webhook_ordering).
    Column("ordered", Boolean, nullable=False, server_default=true()),
    # Shared by the deliveries one worker claimed together and sends one after the other
    # (one request in flight): the per-endpoint limit counts these units.
    Column("claim_token", String(32), nullable=True),
    # The delivery's latest successful attempt, kept on its row rather than as a
    # webhook_attempts row: a delivery that succeeds, the common case, costs one write to
    # record. The delivery log shows it among the attempts (``webhooks.deliverylog``);
    # before another success is written here, this one moves to webhook_attempts.
    Column("success_started_at", Float, nullable=True),
    Column("success_latency_ms", Float, nullable=True),
    Column("success_status_code", Integer, nullable=True),
    Column("success_response_body", Text, nullable=True),
    # No index on (status, next_attempt_at): every delivery changes status three times, and
    # each change rewrote two of its entries. Claims read the partial indexes below; the
    # depth gauge and retention read them too (``store.outbox``); the purge of
    # finished rows reads the oldest rows by id (migration 0011).
    Index("ix_deliveries_sim", "simulation_id", "id"),
    # Active ordered rows by lane, and waiting unordered rows by URL and due time: a claim
    # reads the head of each lane, and the due rows of each URL, from these without visiting
    # the rest of the outbox, nor a URL's rows still waiting for a retry (migration 0015).
    Index("ix_deliveries_lanes", "simulation_id", "event_id",
          sqlite_where=text(LANE_ROWS_WHERE["sqlite"]),
          postgresql_where=text(LANE_ROWS_WHERE["postgresql"])),
    Index("ix_deliveries_loose", "url", "next_attempt_at", "event_id",
          sqlite_where=text(LOOSE_PENDING_WHERE["sqlite"]),
          postgresql_where=text(LOOSE_PENDING_WHERE["postgresql"])),
    # Waiting unordered rows by simulation: the delivery log's pending pages and counts, and
    # a simulation's backlog, without reading other simulations' (migration 0016).
    Index("ix_deliveries_loose_sim", "simulation_id", "id",
          sqlite_where=text(LOOSE_PENDING_WHERE["sqlite"]),
          postgresql_where=text(LOOSE_PENDING_WHERE["postgresql"])),
    Index("ix_deliveries_leased", "claim_token", "lease_until", "url", "simulation_id",
          "ordered", sqlite_where=text(LEASED_WHERE), postgresql_where=text(LEASED_WHERE)),
    # Deliveries that ended without success, by simulation (the delivery log's failed and
    # disabled filters, and their counts); a success never enters it.
    Index("ix_deliveries_ended", "simulation_id", "id", sqlite_where=text(ENDED_WHERE),
          postgresql_where=text(ENDED_WHERE)),
    sqlite_autoincrement=True,
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("delivery_id", BigInteger, nullable=False, index=True),
    Column("started_at", Float, nullable=False),
    Column("latency_ms", Float, nullable=True),
    Column("status_code", Integer, nullable=True),
    # none | dns | connect | tls | timeout | blocked_address | http_status | redirect | other
    Column("error_class", String(32), nullable=True),
    Column("error", Text, nullable=True),
    Column("response_body", Text, nullable=True),
)

simulator_runs = Table(
    "simulator_runs",
    metadata,
    # One row per simulation whose simulator was ever started: which node owns the run, until
    # when (a lease the owner renews), and the last status it wrote, for the other nodes.
    Column("simulation_id", Integer, primary_key=True, autoincrement=False),
    Column("owner_node", String(64), nullable=False),
    Column("lease_until", Float, nullable=False),
    # idle | running | paused | finished | stopped | interrupted
    Column("status", String(16), nullable=False),
    Column("status_json", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
    # The run (a uuid per start), what rebuilds it (settings data and start) and how far its
    # published events go (count and last event id, simulated clock): simulator/hosting/lease.py.
    Column("run_id", String(32), nullable=True),
    Column("spec_json", JSON, nullable=True),
    Column("progress_json", JSON, nullable=True),
    Index("ix_simulator_runs_owner", "owner_node"),
)

simulator_journal = Table(
    "simulator_journal",
    metadata,
    # Every operation a run accepted, in order, with the simulated time it applied at:
    # replayed on the run's seed and settings it gives the run again (simulator/hosting/journal.py).
    Column("run_id", String(32), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("simulation_id", Integer, nullable=False),
    Column("sim_t", Float(precision=53), nullable=False),
    Column("command", String(32), nullable=False),
    Column("args_json", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_simulator_journal_simulation", "simulation_id"),
)

simulator_snapshots = Table(
    "simulator_snapshots",
    metadata,
    # A run's engine state at simulated time ``sim_t`` (simulator/core/snapshot.py), with
    # the journal entries applied by then and the run's events committed by then: a
    # takeover loads the newest and replays only what came after (store/snapshots.py).
    Column("run_id", String(32), primary_key=True),
    Column("sim_t", Float(precision=53), primary_key=True),
    Column("simulation_id", Integer, nullable=False),
    Column("format_version", Integer, nullable=False),
    Column("journal_seq", Integer, nullable=False),
    Column("event_count", BigInteger, nullable=False),
    Column("last_event_id", BigInteger, nullable=True),
    Column("body", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_simulator_snapshots_simulation", "simulation_id"),
)

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    # The "failing since" clock of a simulation's endpoint URL, shared by every worker. A row
    # exists only while the endpoint is failing: a success deletes it, and a failure for
    # another URL of the same simulation (the URL changed) replaces it.
    Column("simulation_id", Integer, primary_key=True),
    Column("url", Text, primary_key=True),
    Column("failing_since", Float, nullable=False),
    Column("last_failure_at", Float, nullable=False),
)
