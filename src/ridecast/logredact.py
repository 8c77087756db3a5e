"""Keeps secrets out of log lines: websocket tokens and API keys in URLs are redacted.

Browsers pass the websocket token as ``?token=``, and a careless client may put an API key
there; uvicorn's access and websocket logs print the whole URL. ``install()`` adds a filter
to every handler that could print such a line, so no token or key ever reaches a log.
"""

from __future__ import annotations

import logging
import re

_SECRET = re.compile(r"((?:^|[?&;\s])(?:token|api_key|key)=)[^&\s\"']+", re.IGNORECASE)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with the value of every ``token=``/``api_key=``/``key=`` parameter hidden."""
    return _SECRET.sub(r"\1" + REDACTED, text)


class RedactSecrets(logging.Filter):
    """Rewrites a record's message and arguments with ``redact`` (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v
                           for k, v in record.args.items()}
        return True


_LOGGERS = ("", "uvicorn", "uvicorn.access", "uvicorn.error", "websockets")


def install() -> None:
    """Add the filter to the handlers and loggers that uvicorn and ridecast log through."""
    secret_filter = RedactSecrets()
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in logger.filters):
            logger.addFilter(secret_filter)
        for handler in logger.handlers:
            if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                handler.addFilter(secret_filter)
