"""How the API shows simulations and templates (JSON views of the store's records)."""

from __future__ import annotations

from typing import Any

from ..store.simulations import SimulationRecord, TemplateRecord


def simulation_json(record: SimulationRecord) -> dict[str, Any]:
    """A simulation as the API shows it."""
    return {
        "id": record.id,
        "name": record.name,
        "data": record.data,
        "template_id": record.template_id,
        "owner_id": record.owner_id,
        "organisation_id": record.org_id,
        "version": record.version,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "messaging_webhook_disabled_at": (
            _iso(record.webhook_disabled_at) if record.webhook_disabled_at else None
        ),
        "messaging_webhook_disabled_reason": record.webhook_disabled_reason,
    }


def template_json(record: TemplateRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "data": record.data,
        "owner_id": record.owner_id,
        "organisation_id": record.org_id,
        "created_at": _iso(record.created_at),
    }


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat()


__all__ = ["simulation_json", "template_json"]
