"""SQL handed straight to the database driver (``exec_driver_sql``), in its own parameter
style (pure, no I/O).

The hot writes (the event log's group commit, webhook leases and attempts) pass rows to the
driver as tuples, skipping SQLAlchemy's per-row work; the statement must then carry the
driver's placeholders: ``?`` for sqlite3, ``$1`` for asyncpg, ``%s`` for psycopg.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Table
from sqlalchemy.engine import Dialect


def in_paramstyle(dialect: Dialect, sql: str) -> str:
    """``sql``, written with ``?`` placeholders (and no other ``?``), in ``dialect``'s style."""
    style = dialect.paramstyle
    if style == "qmark":
        return sql
    pieces = sql.split("?")
    if style == "format":
        marks = ["%s"] * (len(pieces) - 1)
    elif style in ("numeric_dollar", "numeric"):
        sign = "$" if style == "numeric_dollar" else ":"
        marks = [f"{sign}{n}" for n in range(1, len(pieces))]
    else:  # pragma: no cover - no driver we support binds by name only
        raise RuntimeError(f"unsupported paramstyle {style}")
    return "".join(piece + mark for piece, mark in zip(pieces, marks, strict=False)) + pieces[-1]


def insert_qmark(dialect: Dialect, table: Table, columns: Sequence[str]) -> str:
    """The INSERT of one row of ``columns`` into ``table``, names quoted for ``dialect``,
    with ``?`` placeholders (as ``store.txsteps.Many`` takes it)."""
    return insert_values(dialect, table, columns).replace(
        "{values}", f"VALUES ({', '.join('?' * len(columns))})")


def insert_values(dialect: Dialect, table: Table, columns: Sequence[str]) -> str:
    """The INSERT of ``columns`` into ``table`` with ``{values}`` where its rows go (as
    ``store.txsteps.Many``'s ``values`` takes it)."""
    quote = dialect.identifier_preparer
    return (f"INSERT INTO {quote.format_table(table)} "
            f"({', '.join(quote.quote(c) for c in columns)}) {{values}}")


def insert_sql(dialect: Dialect, table: Table, columns: Sequence[str]) -> str:
    """The INSERT of one row of ``columns`` into ``table``, for ``exec_driver_sql``."""
    return in_paramstyle(dialect, insert_qmark(dialect, table, columns))
