"""The live dashboard: static HTML, CSS and ES modules served at ``/`` by ridecast itself.

Nothing is built at install time: ``static/`` holds plain files and a vendored copy of
Leaflet. ``mount_dashboard(app, settings)`` adds ``GET /`` (the page, with the tile settings
inlined) and ``/dashboard/...`` (the assets). The page talks to the public API only: HTTP Basic
to ``/api/v2/...`` and ``/simulation_events/{id}?token=...``.
"""

from __future__ import annotations

from .site import ASSET_PREFIX, STATIC_DIR, mount_dashboard, page_config, render_index

__all__ = ["ASSET_PREFIX", "STATIC_DIR", "mount_dashboard", "page_config", "render_index"]
