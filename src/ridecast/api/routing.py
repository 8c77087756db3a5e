"""The router of every API module: both trailing-slash forms, the one strict JSON decoder,
and operation ids named after the handlers.

Clients of the original service use both forms (``user/token/``, ``simulation/{id}``); a
307 redirect would not do, since many clients do not repeat a PATCH body on redirect.

FastAPI parses a JSON body with ``Request.json()``, the standard library's ``json.loads``,
which accepts a lone surrogate (``"\\ud800"``) that no response can encode again: a row
stored from it would break every listing that shows it. Every route here parses with
``jsondecode`` instead, the decoder the body guard and ingest use.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from .jsondecode import loads

_MISSING = object()


class StrictJsonRequest(Request):
    """A request whose ``json()`` is the edge's strict decoder (``jsondecode.loads``).

    The body guard has usually decoded and checked the body already
    (``scope["state"]["json_body"]``); that value is used as it is. An undecodable body
    raises ``jsondecode.DecodeError``, a ``json.JSONDecodeError``, which FastAPI answers as
    400 ``invalid_json`` with the decoder's reason.
    """

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            parsed = self.scope.get("state", {}).get("json_body", _MISSING)
            self._json = loads(await self.body()) if parsed is _MISSING else parsed
        return self._json


class StrictJsonRoute(APIRoute):
    """An ``APIRoute`` whose handler sees a ``StrictJsonRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


def handler_name(route: APIRoute) -> str:
    """A route's operationId: its handler's name (``create_simulation``, ``get_events``), what
    a generated client names its functions, rather than FastAPI's path-derived
    ``create_simulation_api_v2_simulation_post``. tests/api/test_openapi_client.py checks
    that no two operations share one."""
    return route.name


class SlashRouter(APIRouter):
    """Registers every route twice: as written and with the other trailing-slash form;
    every route parses JSON bodies strictly (``StrictJsonRoute``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("route_class", StrictJsonRoute)
        kwargs.setdefault("generate_unique_id_function", handler_name)
        super().__init__(**kwargs)

    def add_api_route(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().add_api_route(path, endpoint, **kwargs)
        other = path[:-1] if path.endswith("/") else path + "/"
        if other and other != path:
            twin = dict(kwargs, include_in_schema=False)
            if twin.get("operation_id"):
                twin["operation_id"] = twin["operation_id"] + "_slash"
            super().add_api_route(other, endpoint, **twin)
