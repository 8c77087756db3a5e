"""Routes of simulation templates: create, list, read, change (If-Match) and delete.

A template is any visible user's to read and to start simulations from; only its owner or an
admin may change or delete it (403 ``not_owner``). A change works as a simulation's: ``data``
replaces the whole object, ``GET`` gives an ``ETag`` and ``PATCH`` honours ``If-Match``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from .deps import CurrentUser, RuntimeDep
from .params import Id, Offset
from .responses import Template, TemplateList, answers
from .routing import SlashRouter
from .simulation_views import list_meta, template_json
from .simulations import patch_schema, refuse_unknown

router = SlashRouter(tags=["simulations"])

# ``data`` is any JSON object (anything else is a 400 invalid_simulation_data).
_OBJECT: dict[str, Any] = {"type": ["object", "null"]}
# Fields a read-merge-PATCH sends back; ignored, not refused.
_READ_ONLY = {"id", "owner_id", "organisation_id", "version", "created_at", "updated_at"}


class TemplateCreate(BaseModel):
    """Body of ``POST /api/v2/simulation_template``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    data: Any = Field(None, description="Free-form settings object.", json_schema_extra=_OBJECT)


class TemplatePatch(BaseModel):
    """Body of ``PATCH /api/v2/simulation_template/{id}``: ``data`` replaces the whole
    object."""

    model_config = ConfigDict(extra="allow", json_schema_extra=patch_schema(_READ_ONLY))

    name: str | None = Field(None, min_length=1, max_length=200)
    data: Any = Field(None, description="Free-form settings object; replaces the whole data.",
                      json_schema_extra=_OBJECT)


@router.post("/api/v2/simulation_template", status_code=status.HTTP_201_CREATED,
             **answers(Template, 201))
async def create_template(
    body: TemplateCreate, user: CurrentUser, runtime: RuntimeDep, response: Response
) -> dict[str, Any]:
    """Create a template; simulations created from it inherit its ``data``."""
    record = await runtime.simulations.create_template(user, body.name, body.data)
    response.headers["ETag"] = record.etag
    response.headers["Location"] = f"/api/v2/simulation_template/{record.id}"
    return template_json(record)


@router.get("/api/v2/simulation_template", **answers(TemplateList))
async def list_templates(
    user: CurrentUser,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    offset: Offset = 0,
) -> dict[str, Any]:
    """The templates visible to you. A page also stops at ``RIDECAST_MAX_PAGE_BYTES`` of
    stored names and data (``meta.truncated``); page on with ``offset=meta.next_offset``."""
    records, total, truncated = await runtime.simulations.list_templates(
        user, limit=limit, offset=offset, max_bytes=runtime.settings.max_page_bytes)
    return {"objects": [template_json(r) for r in records],
            "meta": list_meta(limit, offset, total, len(records), truncated)}


@router.get("/api/v2/simulation_template/{template_id}", **answers(Template))
async def get_template(
    template_id: Id, user: CurrentUser, runtime: RuntimeDep, response: Response
) -> dict[str, Any]:
    """One template, with its ``ETag`` for a later ``If-Match``."""
    record = await runtime.simulations.get_template(user, template_id)
    response.headers["ETag"] = record.etag
    return template_json(record)


@router.patch("/api/v2/simulation_template/{template_id}", **answers(Template))
async def patch_template(
    template_id: Id,
    body: TemplatePatch,
    user: CurrentUser,
    runtime: RuntimeDep,
    response: Response,
    if_match: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Change a template (its owner or an admin). ``data``, when sent, replaces the whole
    ``data`` object; with ``If-Match: <ETag>`` a change made in between is a 412.
    Simulations already made from it keep their data."""
    refuse_unknown(body.model_extra, _READ_ONLY)
    record = await runtime.simulations.update_template(
        user, template_id, if_match=if_match, name=body.name, data=body.data,
        data_given="data" in body.model_fields_set,
    )
    response.headers["ETag"] = record.etag
    return template_json(record)


@router.delete("/api/v2/simulation_template/{template_id}",
               status_code=status.HTTP_204_NO_CONTENT)
async def delete_template(template_id: Id, user: CurrentUser, runtime: RuntimeDep) -> Response:
    """Delete a template (its owner or an admin); simulations made from it are kept."""
    await runtime.simulations.delete_template(user, template_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
