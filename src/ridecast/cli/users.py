"""``ridecast users create|list|revoke|key``: accounts on the configured store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.table import Table

from .lazy import QuietGroup
from .output import console, print_table

if TYPE_CHECKING:
    from ..store.accounts import AccountStore

app = typer.Typer(help="Users, organisations and API keys.", no_args_is_help=True,
                  cls=QuietGroup)
err = console(stderr=True)
T = TypeVar("T")


def with_accounts(work: Callable[[AccountStore], Awaitable[T]]) -> T:
    """Run ``work`` against the configured store (migrated first); errors exit with 1."""
    # Here, not at the top: `ridecast users --help` needs neither the store nor the settings.
    from ..config import get_settings
    from ..errors import RidecastError
    from ..store.accounts import AccountStore
    from ..store.driver_connections import close_engine
    from ..store.engine import create_engine, upgrade
    from .datadir import prepare_store

    async def run() -> T:
        settings = get_settings()
        prepare_store(settings)
        url = settings.database_url
        await upgrade(url)
        engine = create_engine(url)
        try:
            return await work(AccountStore(engine))
        finally:
            await close_engine(engine)

    try:
        return asyncio.run(run())
    except RidecastError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(1) from None


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="User name (used with HTTP Basic).")],
    org: Annotated[str, typer.Option("--org", help="Organisation (created if new).")],
    admin: Annotated[bool, typer.Option("--admin", help="May see every simulation.")] = False,
) -> None:
    """Create a user; prints its API key as the only line on stdout (shown once)."""

    async def work(accounts: AccountStore) -> str:
        _principal, key = await accounts.create_user(name, org, is_admin=admin)
        return key

    key = with_accounts(work)
    err.print(f"created user [bold]{name}[/bold] in organisation [bold]{org}[/bold]"
              f"{' (admin)' if admin else ''}; its API key follows (store it now):")
    typer.echo(key)


@app.command("key")
def new_key(name: Annotated[str, typer.Argument(help="User name.")]) -> None:
    """Issue another API key for a user; prints it as the only line on stdout."""
    typer.echo(with_accounts(lambda accounts: accounts.new_key(name)))


@app.command("revoke")
def revoke(name: Annotated[str, typer.Argument(help="User name.")]) -> None:
    """Revoke a user: its keys and tokens stop working."""
    with_accounts(lambda accounts: accounts.revoke_user(name))
    err.print(f"revoked user [bold]{name}[/bold]")


@app.command("revoke-key")
def revoke_key(
    name: Annotated[str, typer.Argument(help="User name.")],
    key: Annotated[str, typer.Argument(help="The key's id or display prefix "
                                           "(from `ridecast users keys NAME`).")],
) -> None:
    """Revoke one API key (and the tokens issued with it); the user's other keys keep working."""
    info = with_accounts(lambda accounts: accounts.revoke_key(name, key))
    err.print(f"revoked key {info.id} ({info.prefix}...) of [bold]{name}[/bold]")


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


@app.command("keys")
def list_keys(
    name: Annotated[str, typer.Argument(help="User name.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """List a user's API keys: id, display prefix, created, last used (to the minute), status."""
    keys = with_accounts(lambda accounts: accounts.list_keys(name))
    if as_json:
        typer.echo(json.dumps([
            {"id": k.id, "prefix": k.prefix, "created_at": k.created_at,
             "last_used_at": k.last_used_at, "revoked_at": k.revoked_at} for k in keys
        ]))
        return
    table = Table("id", "prefix", "created", "last used", "status")
    for k in keys:
        table.add_row(str(k.id), k.prefix, _when(k.created_at), _when(k.last_used_at) or "never",
                      "revoked" if k.revoked_at else "active")
    print_table(console(), table)


@app.command("list")
def list_users(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """List users."""
    users = with_accounts(lambda accounts: accounts.list_users())
    if as_json:
        typer.echo(json.dumps([
            {"id": u.id, "name": u.name, "organisation": u.organisation, "is_admin": u.is_admin,
             "revoked": u.revoked_at is not None} for u in users
        ]))
        return
    table = Table("id", "name", "organisation", "admin", "created", "status")
    for u in users:
        table.add_row(
            str(u.id), u.name, u.organisation, "yes" if u.is_admin else "",
            datetime.fromtimestamp(u.created_at, UTC).strftime("%Y-%m-%d %H:%M"),
            "revoked" if u.revoked_at else "active",
        )
    print_table(console(), table)
