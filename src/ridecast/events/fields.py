"""Field types shared by the payload models: UUID-format strings, timestamps, numbers.

Values are validated but kept as the client sent them (a timestamp stays the string it was),
so a stored event is byte-for-byte what the producer meant, with nothing reformatted.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr

_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


def _check_timestamp(value: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("not an ISO 8601 timestamp") from None
    if parsed.tzinfo is None:
        raise ValueError("ISO 8601 timestamp without an offset (add Z or +00:00)")
    return value


def _uuid_schema(schema: dict[str, Any]) -> None:
    # format: uuid says it all to a generator; a pattern beside it only earns a warning
    # (datamodel-codegen cannot put one on a UUID). Validation keeps the pattern.
    schema.pop("pattern", None)
    schema["format"] = "uuid"


UUIDStr = Annotated[
    StrictStr, Field(pattern=_UUID_RE.pattern, json_schema_extra=_uuid_schema)
]
"""A string in UUID format (8-4-4-4-12 hex digits)."""

Timestamp = Annotated[
    StrictStr,
    AfterValidator(_check_timestamp),
    Field(json_schema_extra={"format": "date-time"}),
]
"""An ISO 8601 timestamp with an offset, kept as the string sent."""

Int = StrictInt
Number = StrictFloat
Bool = StrictBool
Str = StrictStr
