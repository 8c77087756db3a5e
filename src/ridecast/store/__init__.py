"""The store: SQLAlchemy tables, engine, the event log and the account/simulation records."""

from __future__ import annotations
