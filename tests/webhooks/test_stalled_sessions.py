"""A worker stopped in the middle of a statement, with rows locked, is ended by the others
(issue 33 item 3), against a real PostgreSQL: a client speaking the wire protocol on a raw
socket locks a delivery row in a transaction, then sends a Bind and an Execute with no Sync
and stops there, as a worker does when it is stopped while writing a ``Many``'s pipeline.
The server then waits for it as "active", where no timeout of the server applies."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator

import asyncpg
import pytest
from sqlalchemy import text

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import outbox_sql
from ridecast.webhooks.claimer import Claimer
from ridecast.webhooks.recorder import Recorder
from tests.waiting import eventually_async


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


class WireClient:
    """The PostgreSQL protocol's few messages this test needs, on a blocking socket (trust
    authentication, as on the test machine)."""

    def __init__(self, database: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", 5432), timeout=10)
        params = b"user\0postgres\0database\0" + database.encode() + b"\0\0"
        body = struct.pack("!i", 196608) + params
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.until_ready()

    def read_message(self) -> tuple[bytes, bytes]:
        head = self._read(5)
        (length,) = struct.unpack("!i", head[1:])
        return head[:1], self._read(length - 4)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the server closed the connection"
            data += chunk
        return data

    def until_ready(self) -> bytes:
        """Read to ReadyForQuery; its transaction status (I, T or E)."""
        while True:
            kind, body = self.read_message()
            assert kind != b"E", body
            if kind == b"Z":
                return body

    def simple(self, sql: str) -> bytes:
        self.sock.sendall(_message(b"Q", sql.encode() + b"\0"))
        return self.until_ready()

    def pipeline_without_sync(self, sql: str) -> None:
        """Parse, Bind and Execute ``sql``, then nothing more: the server runs it and waits
        for the rest of the pipeline."""
        self.sock.sendall(_message(b"P", b"\0" + sql.encode() + b"\0\0\0")
                          + _message(b"B", b"\0\0" + b"\0\0\0\0\0\0")
                          + _message(b"E", b"\0" + b"\0\0\0\0"))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def database(pg_url: str) -> Iterator[str]:
    asyncio.run(upgrade(pg_url))
    yield pg_url


async def _stalled_waiting(admin: asyncpg.Connection, database: str) -> bool:
    """Whether a session of ``database`` with a transaction id waits for its client in the
    middle of a statement ("active", ClientRead)."""
    rows = await admin.fetch(
        "SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() "
        "AND backend_xid IS NOT NULL AND state = 'active' AND wait_event = 'ClientRead'",
        database)
    return bool(rows)


async def _row_free(admin: asyncpg.Connection) -> bool:
    """Whether another session can lock the delivery row now."""
    async with admin.transaction():
        try:
            await admin.execute("SELECT id FROM webhook_deliveries WHERE id = 1 "
                                "FOR UPDATE NOWAIT")
        except asyncpg.LockNotAvailableError:
            return False
    return True


def test_a_session_stopped_mid_statement_with_rows_locked_is_ended_after_the_hold(
    database: str,
) -> None:
    """The stalled session is ended once it has waited longer than the hold, and only then;
    a session idle in its transaction (``hold``'s timeout covers those) and one that locks
    nothing are left alone. The row it locked is free again."""
    name = database.rsplit("/", 1)[1]

    async def scenario() -> None:
        engine = create_engine(database)
        admin = await asyncpg.connect(database.replace("+asyncpg", ""))
        async with engine.begin() as conn:
            now = time.time()
            await conn.execute(text(
                "INSERT INTO webhook_deliveries (id, event_id, simulation_id, message_type, "
                "url, status, attempt_count, next_attempt_at, created_at, updated_at, ordered) "
                "VALUES (1, 1, 1, 'vehicle_use', 'http://x/', 'pending', 0, :now, :now, :now, "
                "true)"), {"now": now})
        sql = outbox_sql("postgresql")
        claimer = Claimer(engine, sql, Recorder(engine, sql))
        stalled, idle, reader = WireClient(name), WireClient(name), WireClient(name)
        try:
            assert stalled.simple("BEGIN; UPDATE webhook_deliveries SET updated_at = 0 "
                                  "WHERE id = 1") == b"T"
            stalled.pipeline_without_sync("SELECT 1")
            assert idle.simple("BEGIN; CREATE TEMP TABLE t (x int)") == b"T"  # has an xid
            reader.pipeline_without_sync("SELECT 1")  # waits mid-pipeline, locks nothing
            await eventually_async(lambda: _stalled_waiting(admin, name),
                                   what="the stalled session waiting")
            assert not await _row_free(admin)
            # Not yet: it has not waited the hold (60 s) for its client.
            assert await claimer.end_stalled(60.0) == 0
            assert not await _row_free(admin)
            ended: list[int] = []

            async def ends() -> bool:
                ended.append(await claimer.end_stalled(0.5))
                return sum(ended) > 0

            await eventually_async(ends, what="a stalled session ended")
            assert sum(ended) == 1
            await eventually_async(lambda: _row_free(admin), what="the row free")
            assert not await _stalled_waiting(admin, name)
            # The idle one is still there, in its transaction.
            assert idle.simple("SELECT 1") == b"T"
        finally:
            for client in (stalled, idle, reader):
                client.close()
            await admin.close()
            await engine.dispose()

    asyncio.run(scenario())


def test_only_postgresql_looks_for_stalled_sessions() -> None:
    """One process writes an SQLite file: nothing to look for, no statement sent."""
    assert outbox_sql("sqlite").ends_stalled is False
    assert outbox_sql("postgresql").ends_stalled is True
