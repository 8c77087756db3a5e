"""``ridecast schema``: JSON Schema of every event type, generated from the models."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def schema(
    message_type: Annotated[
        str | None, typer.Argument(help="Only this type (default: one document of all 18: "
                                   "$defs and a oneOf).")
    ] = None,
    asyncapi: Annotated[bool, typer.Option("--asyncapi", help="Print AsyncAPI instead.")] = False,
) -> None:
    """Print the JSON Schema of the events (or the AsyncAPI document)."""
    from ..events.asyncapi import asyncapi_document
    from ..events.schema import TYPE_NAMES, event_schemas, type_schema

    if asyncapi:
        typer.echo(json.dumps(asyncapi_document(), indent=2))
        return
    if message_type is None:
        typer.echo(json.dumps(event_schemas(), indent=2))
        return
    if message_type not in TYPE_NAMES:
        valid = ", ".join(sorted(TYPE_NAMES))
        raise typer.BadParameter(f"unknown type {message_type!r}; valid: {valid}")
    typer.echo(json.dumps(type_schema(message_type), indent=2))
