"""Whether a failed write was the store refusing a row (pure, no I/O).

A write can fail because the store is unreachable (an outage, ``store/outage.py``), because
it is broken for everyone (a table missing), or because it refuses a value of this write:
a constraint, a check or trigger, a value it cannot keep. Only the last is the fault of the
request that sent the row, and is answered as such (500 ``store_refused``); the others are
503 with ``Retry-After``, as for any store failure.
"""

from __future__ import annotations

import sqlite3

# SQLSTATE classes of a refused row: 22 data exception (a NUL in text, a value out of
# range), 23 integrity constraint violation, P0 a PL/pgSQL RAISE (a trigger's refusal).
_ROW_SQLSTATE_CLASSES = ("22", "23", "P0")


def refuses_row(exc: BaseException) -> bool:
    """True when ``exc``, or an error it wraps, is a store refusing a row's value."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (sqlite3.IntegrityError, sqlite3.DataError)):
            return True
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _ROW_SQLSTATE_CLASSES:
            return True
        orig = getattr(current, "orig", None)  # SQLAlchemy's wrapper of the driver's error
        todo.extend([orig if isinstance(orig, BaseException) else None,
                     current.__cause__, current.__context__])
    return False


__all__ = ["refuses_row"]
