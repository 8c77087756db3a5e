"""A configuration error is one line naming the variable, the value and what is allowed,
and exit status 2 (issue 50): for every setting, and for the commands that read them."""

from __future__ import annotations

import os
import subprocess
import sys
import typing

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from ridecast.config import Settings
from ridecast.config_errors import settings_error_line


def _bad_value(annotation: typing.Any) -> str | None:
    """A value of the wrong kind for a field of ``annotation``; None for free text."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return "no-such-choice"
    if type(None) in args:  # optional: the inner type decides
        inner = [a for a in args if a is not type(None)]
        return _bad_value(inner[0]) if inner else None
    if annotation in (int, float):
        return "abc"
    if annotation is bool:
        return "maybe"
    if typing.get_origin(annotation) is list:
        return "[not json"
    return None


FIELDS = [(name, value) for name, field in Settings.model_fields.items()
          if (value := _bad_value(field.annotation)) is not None]


def test_every_typed_setting_is_walked() -> None:
    """Most settings are typed; each gets a bad value below (free text aside)."""
    assert len(FIELDS) > 50


@pytest.mark.parametrize(("name", "value"), FIELDS)
def test_a_bad_value_is_one_line_naming_the_variable_and_the_value(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """Each setting given a value of the wrong kind: one line, its variable, the value."""
    variable = f"RIDECAST_{name.upper()}"
    monkeypatch.setenv(variable, value)
    with pytest.raises((ValidationError, SettingsError)) as raised:
        Settings()
    line = settings_error_line(raised.value)
    assert line is not None and "\n" not in line
    assert f"{variable}=" in line and value[:10] in line, line


@pytest.mark.parametrize(("env", "said"), [
    ({"RIDECAST_EVENT_RETENTION_S": "abc"}, "RIDECAST_EVENT_RETENTION_S='abc'"),
    ({"RIDECAST_WEBHOOK_LEASE_S": "5", "RIDECAST_WEBHOOK_TIMEOUT_S": "10"},
     "RIDECAST_WEBHOOK_LEASE_S (5.0) must be longer than RIDECAST_WEBHOOK_TIMEOUT_S"),
    ({"RIDECAST_DATABASE_URL": "mysql://u:secret@h/db"},
     "use one of sqlite+aiosqlite://, postgresql+asyncpg://"),
])
@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker"], ["config", "show"]])
def test_the_cli_says_it_in_one_line_and_exits_2(env: dict[str, str], said: str,
                                                 command: list[str]) -> None:
    """No traceback: one line on stderr, exit status 2; a URL's password is not shown."""
    done = subprocess.run([sys.executable, "-m", "ridecast.cli.main", *command],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert said in lines[0] and "secret" not in lines[0], lines[0]
