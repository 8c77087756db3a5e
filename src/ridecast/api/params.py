"""Path and query parameters with bounds in their schema, shared by every router.

Ids are the integers the events carry and the store keeps in signed 64-bit columns: a
larger one is refused as a 400 naming the parameter, never passed to the database (where it
would overflow). Offsets are bounded the same way.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from .jsonlimits import INT64_MAX, INT64_MIN

Id = Annotated[int, Path(ge=INT64_MIN, le=INT64_MAX, description="A signed 64-bit id.")]
"""An integer id in a path (simulation, template, booking, offer, vehicle, node, delivery)."""

Offset = Annotated[int, Query(ge=0, le=INT64_MAX, description="Rows to skip.")]
"""The ``offset=`` of a list endpoint."""
