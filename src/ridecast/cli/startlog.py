"""What ``ridecast serve`` prints while it starts: where the data is and the URLs, no more.

``serve`` says which store it uses and, once listening, one ready line with every URL.
uvicorn's own start-up lines (process id, lifespan steps, "Uvicorn running on ...") repeat
that line or mean nothing to a user, so at the default level they are dropped; with
``RIDECAST_LOG_LEVEL=debug`` they are kept. Warnings and errors pass, but for one: when the
start fails, the application logs one line saying why (``app.create_app``), and uvicorn's
copy of the traceback that follows is kept for debug level.
"""

from __future__ import annotations

import logging

# uvicorn's start-up messages (uvicorn/server.py, uvicorn/lifespan/on.py), by their start.
_STARTUP_MESSAGES = (
    "Started server process",
    "Waiting for application startup",
    "Application startup complete",
    "Uvicorn running on",
)


# What uvicorn logs when the application's start-up fails: the traceback, as its message.
_STARTUP_TRACEBACK = "Traceback (most recent call last)"


class HideStartupChatter(logging.Filter):
    """Drops uvicorn's INFO start-up lines and its copy of a failed start-up's traceback;
    passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str):
            return True
        if record.levelno > logging.INFO:
            return not record.msg.startswith(_STARTUP_TRACEBACK)
        return not record.msg.startswith(_STARTUP_MESSAGES)


def install(log_level: str) -> None:
    """Hide uvicorn's start-up lines unless ``log_level`` is debug (call after
    ``uvicorn.Config``, which configures uvicorn's loggers)."""
    quiet_pool(log_level)
    if log_level == "debug":
        return
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, HideStartupChatter) for f in logger.filters):
        logger.addFilter(HideStartupChatter())


def quiet_pool(log_level: str) -> None:
    """Keep SQLAlchemy's pool bookkeeping ("Pool disposed", "Pool recreating"), which it
    logs at info on every stop, for debug level: it tells an operator nothing."""
    if log_level != "debug":
        # SQLAlchemy names a pool's logger after its class: ours subclasses its queue pool.
        for name in ("sqlalchemy.pool", "ridecast.store.engine.BoundedWaitPool"):
            logging.getLogger(name).setLevel(logging.WARNING)
