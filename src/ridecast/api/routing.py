"""An APIRouter whose paths answer with and without the trailing slash.

Clients of the original service use both forms (``user/token/``, ``simulation/{id}``); a
307 redirect would not do, since many clients do not repeat a PATCH body on redirect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter


class SlashRouter(APIRouter):
    """Registers every route twice: as written and with the other trailing-slash form."""

    def add_api_route(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().add_api_route(path, endpoint, **kwargs)
        other = path[:-1] if path.endswith("/") else path + "/"
        if other and other != path:
            twin = dict(kwargs, include_in_schema=False)
            if twin.get("operation_id"):
                twin["operation_id"] = twin["operation_id"] + "_slash"
            super().add_api_route(other, endpoint, **twin)
