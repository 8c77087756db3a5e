"""A settings error as one line: the variable, the value given and what is allowed.

pydantic reports a bad ``RIDECAST_*`` value as a multi-line error naming the field; a
process that cannot start for it says so in one line on stderr (``cli/main.py``) and exits
with status 2, as for any usage error. pydantic is not imported here: an error of it can
only exist once it has been.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

ENV_PREFIX = "RIDECAST_"


def settings_error_line(exc: BaseException) -> str | None:
    """The one line that says what is wrong with the settings, or None when ``exc`` is not
    a settings validation error."""
    parsing = sys.modules.get("pydantic_settings")
    if parsing is not None and isinstance(exc, parsing.SettingsError):
        return "invalid configuration: " + _unparsed(exc)
    core = sys.modules.get("pydantic_core")
    if core is None or not isinstance(exc, core.ValidationError):
        return None
    if getattr(exc, "title", "") != "Settings":
        return None
    parts = [_describe(error) for error in exc.errors(include_url=False)]
    return "invalid configuration: " + "; ".join(parts)


_PASSWORD = re.compile(r"(//[^:/@]*:)[^@/]*@")


def _unparsed(exc: BaseException) -> str:
    """A value pydantic-settings could not even parse (a list setting that is not JSON)."""
    found = re.search(r'field "(\w+)"', str(exc))
    if found is None:
        return str(exc)
    name = ENV_PREFIX + found[1].upper()
    shown = _PASSWORD.sub(r"\1***@", repr(os.environ.get(name, "")))
    cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
    return f"{name}={shown}: not valid JSON{cause}; a JSON list is expected, e.g. [1, 2]"


def _describe(error: dict[str, Any]) -> str:
    loc = error.get("loc") or ()
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if not loc:  # a rule across settings: its message names them
        return message
    name = ENV_PREFIX + str(loc[0]).upper()
    # A URL's password is not printed (RIDECAST_DATABASE_URL, RIDECAST_BUS_URL).
    shown = _PASSWORD.sub(r"\1***@", repr(error.get("input")))
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{name}={shown}: {message}"


__all__ = ["settings_error_line"]
