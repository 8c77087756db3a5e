"""``ridecast schema``: JSON Schema of every event type, generated from the models."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def schema(
    message_type: Annotated[
        str | None, typer.Argument(help="Only this type (default: all 18 and the union).")
    ] = None,
    asyncapi: Annotated[bool, typer.Option("--asyncapi", help="Print AsyncAPI instead.")] = False,
) -> None:
    """Print the JSON Schema of the events (or the AsyncAPI document)."""
    from ..events.asyncapi import asyncapi_document
    from ..events.schema import event_schemas

    if asyncapi:
        typer.echo(json.dumps(asyncapi_document(), indent=2))
        return
    doc = event_schemas()
    if message_type is not None:
        if message_type not in doc["types"]:
            valid = ", ".join(sorted(doc["types"]))
            raise typer.BadParameter(f"unknown type {message_type!r}; valid: {valid}")
        doc = doc["types"][message_type]
    typer.echo(json.dumps(doc, indent=2))
