"""Organisations, users, API keys, tokens and the visibility rule."""

from __future__ import annotations

from .visibility import Principal, can_see

__all__ = ["Principal", "can_see"]
