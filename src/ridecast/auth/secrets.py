"""API keys and tokens: generation and hashing (pure)."""

from __future__ import annotations

import hashlib
import secrets
import uuid

API_KEY_PREFIX = "rck_"


def new_api_key() -> str:
    """A new API key: ``rck_`` and 43 URL-safe characters (256 random bits)."""
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def new_token() -> str:
    """A new websocket token: a random UUID, as the interface's token response has it."""
    return str(uuid.uuid4())


def hash_secret(secret: str) -> str:
    """SHA-256 hex of a high-entropy secret.

    Keys and tokens carry 122-256 random bits, so a slow password hash adds nothing
    against guessing, and a fast one lets every request look its key up by hash.
    """
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def display_prefix(api_key: str) -> str:
    """The first characters of a key, kept in clear to tell keys apart in listings."""
    return api_key[:10]
