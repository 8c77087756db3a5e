"""Webhook delivery: outbox, sender, retry schedule, target safety (settings, signing: events)."""

from __future__ import annotations
