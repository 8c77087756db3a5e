"""Real ``ridecast worker`` processes for multi-process webhook tests, and what the store
says about their leases: each worker gets its own lease length, so a row's
``lease_until - updated_at`` tells whose lease it is."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import Numeric, cast, func, select, text

from ridecast.store.engine import create_engine
from ridecast.store.tables import webhook_deliveries as D

from .helpers import start_worker


def worker_process(url: str, lease_s: float, env: dict[str, str],
                   log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``ridecast worker`` on the store ``url`` with lease ``lease_s`` and ``env``
    (logging to ``log`` when given)."""
    return start_worker(url, {**env, "RIDECAST_WEBHOOK_LEASE_S": str(lease_s)}, log)


def outbox_state(url: str) -> list[tuple[object, ...]]:
    """Deliveries per (status, lease length, lease still running): what a failure message
    needs to tell whose leases the store holds."""
    async def run() -> list[tuple[object, ...]]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                length = func.round(cast(D.c.lease_until - D.c.updated_at, Numeric), 2)
                running = D.c.lease_until > time.time()
                rows = await conn.execute(select(D.c.status, length, running, func.count())
                                          .group_by(D.c.status, length, running))
                return [tuple(row) for row in rows]
        finally:
            await engine.dispose()

    return asyncio.run(run())


def backends(url: str) -> list[tuple[object, ...]]:
    """The database's other sessions: (pid, state, wait event, seconds in the transaction,
    advisory and row-level locks held, query): what a failure message needs to tell which
    session holds what a claim skips."""
    async def run() -> list[tuple[object, ...]]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(text(
                    "SELECT a.pid, a.state, a.wait_event_type || ':' || a.wait_event, "
                    "round(extract(epoch FROM now() - a.xact_start)::numeric, 2), "
                    "(SELECT count(*) FROM pg_locks AS l WHERE l.pid = a.pid "
                    "AND l.locktype = 'advisory' AND l.granted), "
                    "(SELECT count(*) FROM pg_locks AS l WHERE l.pid = a.pid "
                    "AND l.locktype = 'transactionid' AND l.granted), left(a.query, 80) "
                    "FROM pg_stat_activity AS a WHERE a.datname = current_database() "
                    "AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL"))
                return [tuple(row) for row in rows]
        finally:
            await engine.dispose()

    return asyncio.run(run())


def failure_report(url: str, workers: dict[str, subprocess.Popen[bytes]],
                   logs: dict[str, Path]) -> str:
    """What the store and the workers say, for a failure message: whose leases the store
    holds, which sessions hold what, each worker's exit code and the end of its log."""
    alive = {name: proc.poll() for name, proc in workers.items()}
    # The pool's debug lines (a checkout per transaction) would fill the tail.
    tails = {name: "\n".join(line for line in log.read_text(errors="replace").splitlines()
                             if "Pool" not in line)[-3000:]
             for name, log in logs.items() if log.exists()}
    return (f"outbox (status, lease length, running, count): {outbox_state(url)}; "
            f"sessions in a transaction (pid, state, wait, seconds, advisory locks, "
            f"xid locks, query): {backends(url)}; "
            f"workers' exit codes: {alive}; their logs' ends: {tails}")


def stop_workers(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Resume (if stopped) and end every worker still running; kill it if it lingers."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:  # a loaded machine: do not leave it behind
                proc.kill()
                proc.wait(10)


def leased_by(url: str, lease_s: float) -> set[int]:
    """Deliveries leased now by the worker whose lease is ``lease_s``."""
    async def run() -> set[int]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return set(await conn.scalars(select(D.c.id).where(
                    D.c.status == "delivering", D.c.lease_until > time.time(),
                    func.abs(D.c.lease_until - D.c.updated_at - lease_s) < 0.05)))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def succeeded_ids(url: str, ids: set[int]) -> set[int]:
    """Those of the deliveries ``ids`` whose status is ``succeeded``."""
    async def run() -> set[int]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return set(await conn.scalars(select(D.c.id).where(
                    D.c.id.in_(sorted(ids)), D.c.status == "succeeded")))
        finally:
            await engine.dispose()

    return asyncio.run(run()) if ids else set()


def answered_twice(arrivals: Iterable[tuple[int, int]]) -> int:
    """Requests, as (event id, status) in arrival order, for an event already answered 2xx."""
    answered: set[int] = set()
    again = 0
    for event, status in arrivals:
        if event in answered:
            again += 1
        if status < 300:
            answered.add(event)
    return again
