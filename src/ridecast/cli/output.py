"""Where the CLI prints: a terminal gets colour and tables, a pipe plain lines.

rich wraps every line at 80 columns when stdout is not a terminal, so ``ridecast listen 1
gps_data --count 10 | wc -l`` counted 20. Consoles made here never wrap a line (a terminal
folds a long one itself; a pipe gets it whole), and a table sent to a pipe is one
tab-separated line per row, without header, borders or colour: ``wc -l`` counts records,
``cut -f2`` takes a column. rich adds no colour when the stream is not a terminal (unless
``FORCE_COLOR`` asks for it); with ``NO_COLOR`` set (and not empty) it writes no escape
sequence at all, dim and bold included, not only no colour.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text


def console(*, stderr: bool = False) -> Console:
    """A console of stdout (or stderr) whose ``print`` never breaks a line."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True, **styling())


def styling() -> dict[str, Any]:
    """The ``Console`` arguments for ``NO_COLOR``: with it set (and not empty), no escape
    sequence at all; rich's own handling of it drops colours but keeps dim and bold."""
    return {"color_system": None} if os.environ.get("NO_COLOR") else {}


def plain_cell(cell: RenderableType) -> str:
    """A table cell as one line of plain text (markup removed, tabs and newlines spaced)."""
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = Text.from_markup(cell).plain
    else:
        text = str(cell)
    return " ".join(text.replace("\t", " ").splitlines())


def table_lines(table: Table) -> list[str]:
    """The rows of ``table`` as tab-separated plain lines, in order, without the header."""
    columns = [list(column.cells) for column in table.columns]
    return ["\t".join(plain_cell(cells[row]) for cells in columns)
            for row in range(table.row_count)]


def print_table(out: Console, table: Table) -> None:
    """``table`` drawn on a terminal; one tab-separated line per row anywhere else."""
    if out.is_terminal:
        out.print(table, soft_wrap=False)  # a table fits itself to the terminal's width
        return
    # Written past rich, which would expand the tabs to spaces.
    out.file.write("".join(line + "\n" for line in table_lines(table)))
    out.file.flush()
