"""The vocabulary of a step transaction (``txsteps``): a generator of SQL steps (pure).

The transaction's logic is a generator with no I/O: it yields ``Query`` (rows come back as
tuples) and ``Many`` (a statement for many parameter tuples; nothing comes back) and returns
its result. ``txsteps`` runs it on SQLite's driver thread in one trip, ``pgsteps`` on
asyncpg's connection.

SQL conventions: ``Query`` takes ``:name`` parameters; ``Many`` takes ``?`` placeholders;
each runner translates them to its driver's style.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Query:
    """One statement; its rows (tuples) are sent back into the generator ([] for none)."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Many:
    """One ``?`` statement run for each of ``rows``; None is sent back.

    ``values``: on SQLite, the same work as one statement per many rows (see
    ``VALUES_ROWS``): the text of that statement with ``{values}`` where the rows go, bound
    as ``VALUES (?, ...), (?, ...), ...`` (an INSERT's rows, or a ``WITH u(...) AS
    ({values}) UPDATE ... FROM u``). The driver's thread then gives the GIL up once per
    statement instead of once per row (see ``_run_values``).
    """

    sql: str
    rows: Sequence[tuple[Any, ...]]
    values: str | None = None


Steps = Generator[Query | Many, Any, T]


__all__ = ["Many", "Query", "Steps"]
