"""The one default data directory of ``serve``, ``demo``, ``users`` and ``worker``.

Without ``RIDECAST_DATABASE_URL`` every command uses ``./ridecast-data/ridecast.db``, so a
user made with ``ridecast users create`` can sign in to ``ridecast serve`` or the demo
started from the same folder. The directory is created on first use and printed at start.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import DEFAULT_DATABASE_URL, Settings

DEFAULT_DATA_DIR = Path("ridecast-data")


def prepare_store(settings: Settings, *, announce: bool = True) -> None:
    """Create the default data directory if ``settings`` use it; say which store is used."""
    url = settings.database_url
    if url == DEFAULT_DATABASE_URL:
        DEFAULT_DATA_DIR.mkdir(mode=0o700, exist_ok=True)
        where = f"data directory {DEFAULT_DATA_DIR.resolve()} (set RIDECAST_DATABASE_URL to change)"
    elif url.startswith("sqlite"):
        where = f"database {url.split(':///', 1)[-1]}"
    else:
        where = f"database {url.split('@')[-1]}"
    if announce:
        print(f"ridecast: using {where}", file=sys.stderr, flush=True)
