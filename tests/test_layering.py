"""The package layering that the tree must show, checked by walking every import.

``events`` is the contract (event model, webhook settings, signing): it imports nothing
of ours but the errors table. The SDK (``client``) imports only the contract and the
errors table, never the server. No package below the HTTP surface imports ``app``,
``api`` or ``cli``. One module owns the webhook delivery tables' SQL (``store/outbox.py``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ridecast

ROOT = Path(ridecast.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(module: str) -> bool:
    """Whether ``ridecast.a.b`` names a module or package (not a name inside one)."""
    path = ROOT.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """Every ``ridecast.*`` module that the file imports, anywhere in it."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(
                f"{target}.{alias.name}"
                for alias in node.names
                if _is_module(f"{target}.{alias.name}")
            )
    return {m for m in found if m == "ridecast" or m.startswith("ridecast.")}


def _top(module: str) -> str:
    """The first-level part of ``ridecast.x.y`` (``x``), or ``ridecast`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ridecast"


def _graph() -> dict[str, set[str]]:
    """Top-level part -> top-level parts it imports (itself excluded)."""
    edges: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        src = _top(_module_name(path))
        targets = edges.setdefault(src, set())
        for module in _imports(path):
            dst = _top(module)
            if dst not in (src, "ridecast"):
                targets.add(dst)
    return edges


def test_the_contract_imports_nothing_of_ours_but_the_errors_table() -> None:
    assert _graph()["events"] <= {"errors"}


def test_the_errors_table_imports_nothing_of_ours() -> None:
    assert _graph()["errors"] == set()


def test_the_sdk_imports_only_the_contract_and_the_errors_table() -> None:
    assert _graph()["client"] <= {"events", "errors"}


def test_nothing_below_the_http_surface_imports_app_api_or_cli() -> None:
    surface = {"app", "api", "cli", "__main__"}
    offenders = {
        src: sorted(dsts & surface)
        for src, dsts in _graph().items()
        if src not in surface and dsts & surface
    }
    assert offenders == {}


def _cycle(edges: dict[str, set[str]], among: set[str]) -> list[str] | None:
    """One import cycle among the given parts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, set()) & among):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(among):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_cycle_among_the_runtime_parts() -> None:
    parts = {"runtime", "ingest", "simulations", "webhooks", "hub"}
    assert _cycle(_graph(), parts) is None


def test_only_the_app_and_the_api_reach_the_runtime() -> None:
    allowed = {"app", "api", "cli", "__main__", "runtime"}
    users = {src for src, dsts in _graph().items() if "runtime" in dsts}
    assert users <= allowed


_OUTBOX_SQL = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE)\s+webhook_(?:deliveries|attempts)\b",
                         re.IGNORECASE)
_OUTBOX_OWNER = "ridecast.store.outbox"


def _touches_the_outbox(path: Path) -> bool:
    """Whether the file writes SQL on ``webhook_deliveries`` or ``webhook_attempts``, or
    imports their ``Table`` objects."""
    source = path.read_text(encoding="utf-8")
    if _OUTBOX_SQL.search(source):
        return True
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(
            alias.name in ("webhook_deliveries", "webhook_attempts") for alias in node.names
        ):
            return True
    return False


def test_only_the_outbox_owner_touches_the_delivery_tables() -> None:
    """``store/outbox.py`` holds every statement on the delivery tables; ``tables.py``
    defines them and the migrations change them; nothing else names them in SQL."""
    allowed = {_OUTBOX_OWNER, "ridecast.store.tables"}
    offenders = sorted(
        _module_name(path) for path in ROOT.rglob("*.py")
        if _touches_the_outbox(path)
        and _module_name(path) not in allowed
        and not _module_name(path).startswith("ridecast.store.migrations")
    )
    assert offenders == []


def test_the_layering_check_sees_a_stray_statement(tmp_path: Path) -> None:
    """The check above finds SQL and imports it must refuse (it is not vacuous)."""
    stray = tmp_path / "stray.py"
    stray.write_text('SQL = "update webhook_deliveries set url = 1"\n', encoding="utf-8")
    assert _touches_the_outbox(stray)
    stray.write_text("from ridecast.store.tables import webhook_attempts\n", encoding="utf-8")
    assert _touches_the_outbox(stray)
    stray.write_text('PATH = "/api/v2/simulation/1/webhook_deliveries"\n', encoding="utf-8")
    assert not _touches_the_outbox(stray)
