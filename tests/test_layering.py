"""The layering the tree must keep, and proof that the checks can fail.

The layers themselves are contracts in ``.importlinter``, checked by ``lint-imports`` (run
by ``scripts/check`` and here). What import-linter cannot see is checked below by walking
the syntax tree: SQL and the database's tables belong to ``ridecast.store``, the delivery
tables to its outbox modules, and the difference between SQLite and PostgreSQL (driver
imports, ``isinstance`` on a ``Postgres*`` class) lives only in the store.

Each rule is shown to fail: a copy of the tree with one violation added must be refused.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ridecast
from ridecast.store import tables

ROOT = Path(ridecast.__file__).parent
REPO = ROOT.parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

TABLES = frozenset(tables.metadata.tables)
DELIVERY_TABLES = frozenset({"webhook_deliveries", "webhook_attempts"})
DELIVERY_OWNER = "ridecast.store.outbox"
DRIVERS = frozenset({"sqlite3", "asyncpg", "aiosqlite"})
# Modules outside the store that still hold SQL of their own (none: a new one is a defect).
NOT_YET_MOVED: frozenset[str] = frozenset()

# Statements are written in capitals here; a table named after a keyword, in any case.
_STATEMENT = re.compile(
    r"\bSELECT\b.*\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+\S+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bFOR\s+UPDATE\b",
    re.DOTALL,
)
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE)\s+(\w+)\b", re.IGNORECASE)


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the nodes that are docstrings (prose, not statements)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _render(node: ast.expr) -> str | None:
    """The text of a string expression: literals (implicitly or ``+``-joined), f-strings with
    ``{}`` for what they format; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
            for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left), _render(node.right)
        if left is not None or right is not None:
            return (left if left is not None else "{}") + (right if right is not None else "{}")
    return None


def _strings(tree: ast.AST) -> Iterator[str]:
    """Every outermost string expression of a module, docstrings left out."""
    skip = _docstrings(tree)
    inner: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in skip or id(node) in inner or not isinstance(node, ast.expr):
            continue
        text = _render(node)
        if text is not None:
            inner.update(id(n) for n in ast.walk(node))
            yield text


def _tables_named(source: str) -> tuple[set[str], bool]:
    """(tables that the module's SQL, attribute uses or imports name; whether it holds SQL)."""
    tree = ast.parse(source)
    named: set[str] = set()
    bare: set[str] = set()
    has_sql = False
    for text in _strings(tree):
        if text in TABLES:  # a table's name kept apart, for an f-string or a format()
            bare.add(text)
        if _STATEMENT.search(text):
            has_sql = True
        for match in _TABLE.finditer(text):
            if match.group(1) in TABLES:
                has_sql = True
                named.add(match.group(1))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in TABLES
                and isinstance(node.value, ast.Name) and node.value.id == "tables"):
            named.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[-1] == "tables":
                named.update(alias.name for alias in node.names if alias.name in TABLES)
            if (node.module or "").split(".")[-1] == "tables" or any(
                alias.name == "tables" for alias in node.names
            ):
                has_sql = True
        elif isinstance(node, ast.Import) and any(
            alias.name.endswith("store.tables") for alias in node.names
        ):
            has_sql = True
    if has_sql:
        named |= bare
    return named, has_sql or bool(named)


def _dialect_branch(source: str) -> str | None:
    """What makes the module speak to one database in particular, or None."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in DRIVERS:
                    return f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if (node.module or "").split(".")[0] in DRIVERS:
                return f"from {node.module} import"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "isinstance" and len(node.args) == 2):
            classes = ast.unparse(node.args[1])
            if re.search(r"\b(?:Postgres|Sqlite|SQLite)\w*", classes):
                return f"isinstance(..., {classes})"
    return None


def _offences(root: Path) -> list[str]:
    """Every breach of the SQL-ownership and dialect rules in the tree at ``root``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        if module.startswith(("ridecast.store.migrations", "ridecast.store.tables")):
            continue
        source = path.read_text(encoding="utf-8")
        named, has_sql = _tables_named(source)
        in_store = module.startswith("ridecast.store")
        if not in_store and module not in NOT_YET_MOVED:
            if has_sql:
                found.append(f"{module}: SQL or tables outside the store {sorted(named)}")
            if (branch := _dialect_branch(source)) is not None:
                found.append(f"{module}: a dialect branch outside the store ({branch})")
        if named & DELIVERY_TABLES and not module.startswith(DELIVERY_OWNER):
            found.append(f"{module}: the delivery tables outside {DELIVERY_OWNER}")
    return found


def _lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(config)],
        cwd=src.parent, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_the_import_contracts_hold() -> None:
    """``lint-imports`` keeps every contract of ``.importlinter`` on the tree as it is."""
    result = _lint_imports(ROOT.parent, REPO / ".importlinter")
    assert result.returncode == 0, result.stdout + result.stderr


def test_sql_and_dialects_live_in_the_store() -> None:
    """No SQL, table object or driver outside the store; the delivery tables only in the
    outbox modules."""
    assert _offences(ROOT) == []


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of ``src/ridecast`` (sources only) to break on purpose."""
    copy = tmp_path / "src" / "ridecast"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def _append(tree: Path, module: str, line: str) -> None:
    path = tree.joinpath(*module.split("/"))
    path.write_text(path.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")


UPWARD_IMPORTS = [
    ("store/eventlog.py", "from ..webhooks import claimer as _up"),
    ("bus/memory.py", "from ..hub import hub as _up"),
    ("auth/credentials.py", "from ..store import accounts as _up"),
    ("webhooks/sender.py", "from ..simulator.hosting import runner as _up"),
    ("store/__init__.py", "from .. import webhooks as _up"),  # with webhooks -> store: a cycle
    ("events/envelope.py", "from ..store import eventlog as _up"),
    ("client/stream.py", "from ..config import Settings as _up"),
    ("client/stream.py", "import sqlalchemy as _up"),
    ("simulator/core/engine.py", "import asyncio as _up"),
    ("simulator/core/engine.py", "from ...store import eventlog as _up"),
]


@pytest.mark.parametrize(("module", "line"), UPWARD_IMPORTS)
def test_an_import_that_breaks_a_layer_fails_the_check(tree: Path, module: str,
                                                       line: str) -> None:
    """A copy of the tree with one forbidden import added fails ``lint-imports``."""
    _append(tree, module, line)
    result = _lint_imports(tree.parent, REPO / ".importlinter")
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout


STRAY_SQL = [
    ("webhooks/service.py", "from ..store import tables\n"
     "def _f() -> None:\n    tables.webhook_deliveries.update()"),
    ("webhooks/service.py", '_Q = ("UPDATE webhook_"\n      "deliveries SET url = 1")'),
    ("webhooks/service.py", '_Q = "UPDATE " + "webhook_deliveries" + " SET url = 1"'),
    ("webhooks/service.py", '_T = "webhook_deliveries"\n_Q = f"UPDATE {_T} SET url = 1"'),
    ("hub/hub.py", '_Q = "SELECT id FROM simulations WHERE id = 1"'),
    ("api/health.py", "from ..store.tables import webhook_endpoints as _t"),
    ("webhooks/sender.py", "import sqlite3 as _d"),
    ("webhooks/service.py", "import asyncpg as _d"),
    ("webhooks/service.py", "def _f(x: object) -> bool:\n"
     "    return isinstance(x, PostgresOutboxSql)  # type: ignore[name-defined]"),
    ("store/eventlog.py", '_Q = "DELETE FROM webhook_attempts"'),
]


@pytest.mark.parametrize(("module", "line"), STRAY_SQL)
def test_sql_outside_its_owner_fails_the_check(tree: Path, module: str, line: str) -> None:
    """A copy of the tree with one statement, table use or dialect branch out of place is
    refused by the SQL-ownership check."""
    assert _offences(tree) == []
    _append(tree, module, line)
    assert _offences(tree) != []


def test_the_sql_check_leaves_urls_and_prose_alone(tree: Path) -> None:
    """A URL that names a table, and prose with SQL words, are not SQL."""
    _append(tree, "api/webhooks.py", '_P = "/api/v2/simulation/1/webhook_deliveries"\n'
            '_M = "select a simulation from the list"\n'
            '_N = f"update {1} from the node"')
    assert _offences(tree) == []
