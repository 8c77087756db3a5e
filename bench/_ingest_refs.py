"""Reference servers for bench/ingest.py, run as ``python bench/_ingest_refs.py KIND PORT DB``.

* ``ceiling``: a bare Starlette endpoint on uvicorn that reads the body and answers 201 — the
  most any ASGI ingest endpoint can do on this machine;
* ``naive``: what a first version would do — parse with json, insert with aiosqlite and
  commit once per request (one fsync each), on the same WAL SQLite settings.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator

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


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    app = ceiling_app() if kind == "ceiling" else naive_app(sys.argv[3])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
