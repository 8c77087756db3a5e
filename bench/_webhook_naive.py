"""A naive durable webhook pipeline, the second reference of bench/webhooks.py.

Run as ``python bench/_webhook_naive.py PORT DB HOOK_URL SENDERS``. It does the job
ridecast does in the bench's burst, ingest and durable delivery both, the way a first
version would, on the same WAL SQLite settings and with the same lean HTTP client as the
lean reference (ridecast's ``webhooks/http11.py`` pool, keep-alive):

* ``POST /api/v2/simulation/{id}/events``: the body parsed with ``json``, each event
  stamped (``simulation_id``, ``server_ts``) and inserted with its delivery row (aiosqlite),
  one commit per request (bench/ingest.py's naive endpoint, plus the outbox row); then the
  dispatcher is woken;
* the dispatcher claims up to 256 pending deliveries at a time with their bodies (a SELECT
  joined to the events, an UPDATE to ``delivering``, one commit) into a queue of at most
  512, from which ``SENDERS`` tasks POST each one (the Standard Webhooks id and timestamp
  headers, unsigned, as ridecast sends them in the bench, which sets no secret);
* each attempt's outcome (status, latency) is written to its delivery row with its own
  commit.

What it leaves out (authentication, validation, retries, limits, the delivery log's API)
only makes it faster. ``GET /healthz`` answers once it is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aiosqlite
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ridecast.webhooks.http11 import Pool

CLAIM_ROWS = 256
QUEUE_ROWS = 512


async def _connect(db_path: str) -> aiosqlite.Connection:
    db = await aiosqlite.connect(db_path, timeout=30)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    return db


async def dispatch(db_path: str, hook_url: str, senders: int, wake: asyncio.Event) -> None:
    """Claim pending deliveries, send them, record each outcome (see the module docstring)."""
    db = await _connect(db_path)
    target = urlsplit(hook_url)
    host, port = target.hostname or "127.0.0.1", target.port or 80
    start = (f"POST {target.path} HTTP/1.1\r\nhost: {target.netloc}\r\n"
             "content-type: application/json\r\nuser-agent: naive/1\r\n")
    pool = Pool(connect_timeout_s=5)
    queue: asyncio.Queue[tuple[int, int, bytes]] = asyncio.Queue(QUEUE_ROWS)

    async def sender() -> None:
        while True:
            delivery_id, event_id, body = await queue.get()
            request = (f"{start}content-length: {len(body)}\r\nwebhook-id: msg_{event_id}\r\n"
                       f"webhook-timestamp: {int(time.time())}\r\n\r\n").encode() + body
            t0 = time.perf_counter()
            try:
                answer = await pool.post("http", host, port, host, request, 1024)
                status, code = ("succeeded" if 200 <= answer.status < 300 else "failed",
                                answer.status)
            except (OSError, ValueError):
                status, code = "failed", None
            await db.execute(
                "UPDATE deliveries SET status = ?, attempts = attempts + 1, status_code = ?, "
                "latency_ms = ?, updated_at = ? WHERE id = ?",
                (status, code, (time.perf_counter() - t0) * 1000, time.time(), delivery_id))
            await db.commit()

    tasks = [asyncio.create_task(sender()) for _ in range(senders)]
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=0.1)
            wake.clear()
            while True:
                rows = list(await db.execute_fetchall(
                    "SELECT d.id, d.event_id, e.body FROM deliveries d JOIN events e "
                    "ON e.id = d.event_id WHERE d.status = 'pending' ORDER BY d.id "
                    f"LIMIT {CLAIM_ROWS}"))
                if not rows:
                    break
                marks = ", ".join("?" * len(rows))
                await db.execute(f"UPDATE deliveries SET status = 'delivering', updated_at = ? "
                                 f"WHERE id IN ({marks})", (time.time(), *(r[0] for r in rows)))
                await db.commit()
                for row in rows:
                    await queue.put((int(row[0]), int(row[1]), bytes(row[2])))
    finally:
        for task in tasks:
            task.cancel()
        await pool.close()
        await db.close()


def naive_app(db_path: str, hook_url: str, senders: int) -> Starlette:
    state: dict[str, aiosqlite.Connection] = {}
    wake = asyncio.Event()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        db = await _connect(db_path)
        await db.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY "
                         "AUTOINCREMENT, simulation_id INT, message_type TEXT, body BLOB)")
        await db.execute("CREATE TABLE IF NOT EXISTS deliveries (id INTEGER PRIMARY KEY "
                         "AUTOINCREMENT, event_id INT, status TEXT, attempts INT, "
                         "status_code INT, latency_ms REAL, updated_at REAL)")
        await db.execute("CREATE INDEX IF NOT EXISTS ix_deliveries_status "
                         "ON deliveries (status, id)")
        await db.commit()
        state["db"] = db
        dispatcher = asyncio.create_task(dispatch(db_path, hook_url, senders, wake))
        yield
        dispatcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await dispatcher
        await db.close()

    async def ingest(request: Request) -> Response:
        simulation_id = int(request.path_params["simulation_id"])
        payload = json.loads(await request.body())
        items = payload if isinstance(payload, list) else [payload]
        stamp = datetime.now(UTC).isoformat()
        db = state["db"]
        ids = []
        for item in items:
            event = {"simulation_id": simulation_id, **item, "server_ts": stamp}
            cursor = await db.execute(
                "INSERT INTO events (simulation_id, message_type, body) VALUES (?, ?, ?)",
                (simulation_id, event["message_type"], json.dumps(event).encode()))
            await db.execute("INSERT INTO deliveries (event_id, status, attempts, updated_at) "
                             "VALUES (?, 'pending', 0, ?)", (cursor.lastrowid, time.time()))
            ids.append(str(cursor.lastrowid))
        await db.commit()
        wake.set()
        return Response(json.dumps({"event_ids": ids}), 201, media_type="application/json")

    async def health(_request: Request) -> Response:
        return Response(b"ok")

    return Starlette(routes=[
        Route("/api/v2/simulation/{simulation_id:int}/events", ingest, methods=["POST"]),
        Route("/healthz", health),
    ], lifespan=lifespan)


if __name__ == "__main__":
    port, db_path, hook_url, senders = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                                        int(sys.argv[4]))
    uvicorn.run(naive_app(db_path, hook_url, senders), host="127.0.0.1", port=port,
                log_level="warning", access_log=False)
