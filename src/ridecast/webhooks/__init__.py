"""Webhook delivery: settings, outbox, sender, retry schedule, signing, target safety."""

from __future__ import annotations
