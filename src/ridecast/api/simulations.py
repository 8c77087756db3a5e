"""Routes of simulations (templates: ``templates.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadRequest
from .deps import CurrentUser, RuntimeDep
from .jsonlimits import INT64_MAX, INT64_MIN
from .params import Id, Offset
from .responses import Simulation, SimulationList, answers
from .routing import SlashRouter
from .simulation_views import list_meta, simulation_json

router = SlashRouter(tags=["simulations"])

# Fields a client may send back after reading a simulation; they are ignored, not refused,
# so a read-merge-PATCH of the whole object works.
_READ_ONLY = {
    "id", "template_id", "owner_id", "organisation_id", "version", "created_at", "updated_at",
    "messaging_webhook_disabled_at", "messaging_webhook_disabled_reason",
}


# ``data`` is any JSON object (anything else is a 400 invalid_simulation_data).
_OBJECT: dict[str, Any] = {"type": ["object", "null"]}


class SimulationCreate(BaseModel):
    """Body of ``POST /api/v2/simulation``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    data: Any = Field(None, description="Free-form settings object (webhook keys, simulator).",
                      json_schema_extra=_OBJECT)
    template_id: int | None = Field(
        None, ge=INT64_MIN, le=INT64_MAX, description="Start from this template's data."
    )


def patch_schema(read_only: set[str]) -> Any:
    """A PATCH body's schema hook: extra fields are allowed only to ignore the read-only
    ones a read-merge-PATCH sends back; any other is a 400, so the schema names them and
    allows nothing else."""

    def hook(schema: dict[str, Any]) -> None:
        props = schema.setdefault("properties", {})
        for name in sorted(read_only):
            props.setdefault(name, {"description": "Read-only: sent back by a "
                                                   "read-merge-PATCH, ignored."})
        schema["additionalProperties"] = False

    return hook


def refuse_unknown(extra: dict[str, Any] | None, read_only: set[str]) -> None:
    """400 for a PATCH field that is neither settable nor read-only."""
    unknown = sorted(set(extra or {}) - read_only)
    if unknown:
        raise BadRequest(
            f"unknown field(s): {', '.join(unknown)}; a PATCH may set name and data",
            details=[{"field": f"body.{name}", "message": "unknown field"} for name in unknown],
        )


class SimulationPatch(BaseModel):
    """Body of ``PATCH /api/v2/simulation/{id}``: ``data`` replaces the whole object."""

    model_config = ConfigDict(extra="allow", json_schema_extra=patch_schema(_READ_ONLY))

    name: str | None = Field(None, min_length=1, max_length=200)
    data: Any = Field(None, description="Free-form settings object; replaces the whole data.",
                      json_schema_extra=_OBJECT)


def _with_etag(response: Response, etag: str) -> None:
    response.headers["ETag"] = etag


@router.post("/api/v2/simulation", status_code=status.HTTP_201_CREATED,
             **answers(Simulation, 201, "The new simulation (ETag and Location headers)."))
async def create_simulation(
    body: SimulationCreate, user: CurrentUser, runtime: RuntimeDep, response: Response
) -> dict[str, Any]:
    """Create a simulation; with ``template_id`` it inherits the template's ``data``."""
    record = await runtime.simulations.create(user, body.name, body.data, body.template_id)
    _with_etag(response, record.etag)
    response.headers["Location"] = f"/api/v2/simulation/{record.id}"
    return simulation_json(record)


@router.get("/api/v2/simulation", **answers(SimulationList))
async def list_simulations(
    user: CurrentUser,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    """The simulations visible to you (yours, your organisation's; all for admins).

    A page also stops at ``RIDECAST_MAX_PAGE_BYTES`` of stored names and data
    (``meta.truncated``); page on with ``offset=meta.next_offset``.
    """
    records, total, truncated = await runtime.simulations.list_visible(
        user, limit=limit, offset=offset, max_bytes=runtime.settings.max_page_bytes)
    return {
        "objects": [simulation_json(r) for r in records],
        "meta": list_meta(limit, offset, total, len(records), truncated),
    }


@router.get("/api/v2/simulation/{simulation_id}", **answers(Simulation))
async def get_simulation(
    simulation_id: Id, user: CurrentUser, runtime: RuntimeDep, response: Response
) -> dict[str, Any]:
    """One simulation, with its ``ETag`` for a later ``If-Match``."""
    record = await runtime.simulations.get(user, simulation_id)
    _with_etag(response, record.etag)
    return simulation_json(record)


@router.patch("/api/v2/simulation/{simulation_id}", **answers(Simulation))
async def patch_simulation(
    simulation_id: Id,
    body: SimulationPatch,
    user: CurrentUser,
    runtime: RuntimeDep,
    response: Response,
    if_match: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Change a simulation. ``data``, when sent, replaces the whole ``data`` object.

    To add a key safely, read the simulation, merge into its ``data`` and PATCH the result
    with ``If-Match: <ETag>``; a 412 means someone changed it in between.
    """
    refuse_unknown(body.model_extra, _READ_ONLY)
    record = await runtime.simulations.update(
        user,
        simulation_id,
        if_match=if_match,
        name=body.name,
        data=body.data,
        data_given="data" in body.model_fields_set,
    )
    _with_etag(response, record.etag)
    return simulation_json(record)


@router.delete("/api/v2/simulation/{simulation_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_simulation(simulation_id: Id, user: CurrentUser, runtime: RuntimeDep) -> Response:
    """Delete a simulation: its streams close and it stops producing events."""
    await runtime.simulations.delete(user, simulation_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
