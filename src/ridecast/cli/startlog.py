"""What ``ridecast serve`` prints while it starts: where the data is and the URLs, no more.

``serve`` says which store it uses and, once listening, one ready line with every URL.
uvicorn's own start-up lines (process id, lifespan steps, "Uvicorn running on ...") repeat
that line or mean nothing to a user, so at the default level they are dropped; with
``RIDECAST_LOG_LEVEL=debug`` they are kept. Warnings and errors always pass.
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


class HideStartupChatter(logging.Filter):
    """Drops uvicorn's INFO start-up lines; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not isinstance(record.msg, str):
            return True
        return not record.msg.startswith(_STARTUP_MESSAGES)


def install(log_level: str) -> None:
    """Hide uvicorn's start-up lines unless ``log_level`` is debug (call after
    ``uvicorn.Config``, which configures uvicorn's loggers)."""
    if log_level == "debug":
        return
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, HideStartupChatter) for f in logger.filters):
        logger.addFilter(HideStartupChatter())
