"""`rag keys create|list|revoke`: API keys scoped to collections (`tools.store.keys`), in the store's database."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.config.settings import Settings
from agent.core.errors import InputError
from agent.core.keys import settings_keys
from tools.scope import ScopeError
from tools.store.keys import ApiKey, PostgresKeys, check_collections

T = TypeVar("T")

keys_app = typer.Typer(
    help="API keys scoped to collections: create (prints the token once), list, revoke.", no_args_is_help=True
)
console = Console(highlight=False)


def _with_keys(fn: Callable[[PostgresKeys], Awaitable[T]]) -> T:
    """Run `fn` on the keys of the configured database (table created when missing)."""

    async def run() -> T:
        async with settings_keys(Settings()) as keys:
            return await fn(keys)

    return asyncio.run(run())


def _collections(raw: str) -> tuple[str, ...]:
    try:
        return check_collections([c for c in raw.split(",") if c.strip()])
    except ScopeError as exc:
        raise InputError(f"--collections: {exc}") from None


@keys_app.command("create")
def create(
    collections: Annotated[
        str, typer.Option("--collections", help="Comma-separated collections the key may use, e.g. a,b.")
    ],
    name: Annotated[str, typer.Option("--name", help="A label for the key (who or what holds it).")] = "",
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"id", "name", "collections", "created_at", "token"} only.')
    ] = False,
) -> None:
    """Create a key for COLLECTIONS and print its token: the only time it is shown (the database keeps a hash).
    Callers send it as `Authorization: Bearer <token>` and see only those collections."""
    names = _collections(collections)
    key, token = _with_keys(lambda keys: keys.create(names, name))
    if as_json:
        print(json.dumps(key.to_json() | {"token": token}))
        return
    console.print(f"key {key.id} ({', '.join(key.collections)}): {token}", markup=False, soft_wrap=True)
    console.print("store the token now: it is not shown again", markup=False)


@keys_app.command("list")
def list_keys(
    as_json: Annotated[bool, typer.Option("--json", help="Print the keys as JSON only.")] = False,
) -> None:
    """Every key: id, name, collections, created, revoked. Tokens and hashes are never shown."""
    found: list[ApiKey] = _with_keys(lambda keys: keys.list())
    if as_json:
        print(json.dumps({"keys": [k.to_json() for k in found]}))
        return
    table = Table("id", "name", "collections", "created", "revoked")
    for k in found:
        revoked = "-" if k.revoked_at is None else k.revoked_at.isoformat(timespec="seconds")
        created = k.created_at.isoformat(timespec="seconds")
        table.add_row(str(k.id), Text(k.name or "-"), ", ".join(k.collections), created, revoked)
    console.print(table)


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[int, typer.Argument(help="Key id (`rag keys list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the revoked key as JSON only.")] = False,
) -> None:
    """Revoke a key: a running `rag serve` refuses its token (401) within API_KEYS_CACHE_S seconds (5 by default).
    Exit 1 when there is no such key."""
    key = _with_keys(lambda keys: keys.revoke(key_id))
    if key is None:
        raise InputError(f"no key {key_id}; `rag keys list` shows the keys")
    if as_json:
        print(json.dumps(key.to_json()))
    else:
        console.print(
            f"revoked key {key.id} ({', '.join(key.collections)}); a running rag serve refuses it within "
            f"API_KEYS_CACHE_S={Settings().api_keys_cache_s:g} s",
            markup=False,
        )
