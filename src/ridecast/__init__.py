"""ridecast: real-time event delivery for ridesharing simulations and operations.

The package layout follows the architecture in docs/design.md: ``events`` is the contract,
``api`` the HTTP surface, ``hub`` the websocket streams, ``webhooks`` the outbound
deliveries, ``store`` the event log, ``bus`` the fan-out between processes, ``simulator``
the event producer, ``cli`` and ``client`` what users touch.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
