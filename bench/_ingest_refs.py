"""Reference servers for bench/ingest.py: ``python bench/_ingest_refs.py KIND PORT [DB [POOL]]``.

* ``wire``: no framework at all, a bare asyncio protocol (uvloop's, as uvicorn picks it)
  that answers every complete request with a fixed 201: what the load generator can drive
  on this machine, the check that it is not what limits the other contenders;
* ``ceiling``: a bare Starlette endpoint on uvicorn that reads the body and answers 201 — the
  most any ASGI ingest endpoint can do on this machine;
* ``naive``: what a first version would do — parse with json, insert with aiosqlite and
  commit once per request (one fsync each), on the same WAL SQLite settings;
* ``naive-pg``: the same on PostgreSQL (``DB`` is a ``postgresql://`` URL, ``POOL`` the
  pool's size: the bench gives one connection per client connection, so that no request
  waits for the pool): asyncpg, each request's INSERTs in a transaction of their own,
  committed (with PostgreSQL's default ``synchronous_commit``, one WAL flush each, which
  PostgreSQL may share between commits that arrive together).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def ceiling_app() -> Starlette:
    async def ingest(request: Request) -> Response:
        await request.body()
        return Response(b'{"event_ids":["1"],"count":1}', 201, media_type="application/json")

    return Starlette(routes=[Route("/ingest", ingest, methods=["POST"])])


def naive_app(db_path: str) -> Starlette:
    import aiosqlite

    state: dict[str, aiosqlite.Connection] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        db = await aiosqlite.connect(db_path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY "
                         "AUTOINCREMENT, simulation_id INT, message_type TEXT, body BLOB)")
        state["db"] = db
        yield
        await db.close()

    async def ingest(request: Request) -> Response:
        payload = json.loads(await request.body())
        items = payload if isinstance(payload, list) else [payload]
        db = state["db"]
        ids = []
        for item in items:
            cursor = await db.execute(
                "INSERT INTO events (simulation_id, message_type, body) VALUES (?, ?, ?)",
                (1, item["message_type"], json.dumps(item).encode()))
            ids.append(cursor.lastrowid)
        await db.commit()
        return Response(json.dumps({"event_ids": ids}), 201, media_type="application/json")

    return Starlette(routes=[Route("/ingest", ingest, methods=["POST"])], lifespan=lifespan)


def naive_pg_app(url: str, pool_size: int) -> Starlette:
    import asyncpg

    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        pool = await asyncpg.create_pool(url, min_size=pool_size, max_size=pool_size)
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS naive_events (id BIGSERIAL PRIMARY "
                               "KEY, simulation_id INT, message_type TEXT, body BYTEA)")
        state["pool"] = pool
        yield
        await pool.close()

    async def ingest(request: Request) -> Response:
        payload = json.loads(await request.body())
        items = payload if isinstance(payload, list) else [payload]
        ids = []
        async with state["pool"].acquire() as conn, conn.transaction():
            for item in items:
                ids.append(await conn.fetchval(
                    "INSERT INTO naive_events (simulation_id, message_type, body) "
                    "VALUES ($1, $2, $3) RETURNING id",
                    1, item["message_type"], json.dumps(item).encode()))
        return Response(json.dumps({"event_ids": ids}), 201, media_type="application/json")

    return Starlette(routes=[Route("/ingest", ingest, methods=["POST"])], lifespan=lifespan)


class _Wire(asyncio.Protocol):
    """Answers each request (head, then a ``Content-Length`` body) with a fixed 201."""

    ANSWER = (b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
              b"content-length: 29\r\n\r\n" b'{"event_ids":["1"],"count":1}')

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
        answers = 0
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buffer[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15:head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0
                              else len(head)]) if at >= 0 else 0
            if len(buffer) < end + 4 + length:
                break
            buffer = buffer[end + 4 + length:]
            answers += 1
        self.buffer = buffer
        if answers and self.transport is not None:
            self.transport.write(self.ANSWER * answers)


def serve_wire(port: int) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Wire, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "wire":
        serve_wire(port)
        sys.exit(0)
    apps = {"ceiling": ceiling_app, "naive": lambda: naive_app(sys.argv[3]),
            "naive-pg": lambda: naive_pg_app(sys.argv[3], int(sys.argv[4]))}
    uvicorn.run(apps[kind](), host="127.0.0.1", port=port, log_level="warning",
                access_log=False)
