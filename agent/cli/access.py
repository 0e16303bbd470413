"""`rag access grant|revoke|list|set-groups`: which groups may use which collections, with which role
(`agent.core.grants`, the `access_grants` table in the store's database), and the groups allowed to read a stored
document (`tools.ingest.ports.DocumentGroups`). The local CLI is the operator: it reads and changes everything."""

from __future__ import annotations

import asyncio
import json
from contextlib import AbstractAsyncContextManager
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli.opened import run_on
from agent.config.settings import Settings
from agent.core.errors import InputError
from agent.core.grants import Grant, GrantStore, checked_grant, settings_grants
from agent.core.wiring import settings_store
from tools.access import AccessError, Role, check_groups
from tools.ingest.ports import document_groups_port
from tools.scope import DEFAULT_COLLECTION, ScopeError, check_collection

access_app = typer.Typer(
    help="Groups' access to collections (grant, revoke, list) and the groups allowed to read a document (set-groups).",
    no_args_is_help=True,
)
console = Console(highlight=False)


def _grants() -> AbstractAsyncContextManager[GrantStore]:
    """The grants of the configured database (table created when missing)."""
    return settings_grants(Settings())


DocumentGroupsOption = Annotated[
    str | None,
    typer.Option(
        "--groups",
        help="Comma-separated groups allowed to read the documents, e.g. a,b (default: each document's own "
        "metadata `groups`; none: everyone).",
    ),
]
"""The `--groups` option of the commands that store documents (`tools.ingest.groups`)."""


def split_groups(raw: str, option: str = "--groups") -> tuple[str, ...]:
    """The groups of a comma-separated option value (`a,b`; blanks between commas ignored), valid, distinct, sorted;
    empty for an empty value.

    Raises:
        InputError: an invalid group name (named, with the option).
    """
    try:
        return check_groups([g for g in raw.split(",") if g.strip()])
    except AccessError as exc:
        raise InputError(f"{option}: {exc}") from None


def _checked(group: str, collection: str, role: str = Role.READER) -> tuple[str, str, Role]:
    try:
        return checked_grant(group, collection, role)
    except (AccessError, ScopeError) as exc:
        raise InputError(str(exc)) from None


ROLE_HELP = "reader (search and ask), uploader (also add and delete documents), admin (also set documents' groups)."


@access_app.command("grant")
def grant(
    group: Annotated[str, typer.Argument(help="The group (as the identity provider's groups claim, or a key's).")],
    collection: Annotated[str, typer.Argument(help="The collection its members may use.")],
    role: Annotated[str, typer.Option("--role", help=ROLE_HELP)] = Role.READER.value,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"group", "collection", "role", "created_at"} only.')
    ] = False,
) -> None:
    """Give GROUP a role in COLLECTION (replacing the role it held there). Its members see only the documents whose
    groups they are in; a running `rag serve` applies it on the next request."""
    checked = _checked(group, collection, role)
    made: Grant = run_on(_grants, lambda grants: grants.grant(*checked))
    if as_json:
        print(json.dumps(made.to_json()))
        return
    console.print(f"{made.group}: {made.role.value} in {made.collection}", markup=False, soft_wrap=True)


@access_app.command("revoke")
def revoke(
    group: Annotated[str, typer.Argument(help="The group.")],
    collection: Annotated[str, typer.Argument(help="The collection.")],
) -> None:
    """Take GROUP's role in COLLECTION away. Exit 1 when it held none."""
    group, collection, _ = _checked(group, collection)
    if not run_on(_grants, lambda grants: grants.revoke(group, collection)):
        raise InputError(f"{group!r} holds no role in {collection!r}; `rag access list` shows the grants")
    console.print(f"{group}: no role in {collection} any more", markup=False, soft_wrap=True)


@access_app.command("list")
def list_grants(
    as_json: Annotated[
        bool,
        typer.Option("--json", help='Print {"grants": [{"group", "collection", "role", "created_at"}]} only.'),
    ] = False,
) -> None:
    """Every grant, by group then collection."""
    found: list[Grant] = run_on(_grants, lambda grants: grants.list())
    if as_json:
        print(json.dumps({"grants": [g.to_json() for g in found]}))
        return
    table = Table("group", "collection", "role", "granted")
    for g in found:
        table.add_row(Text(g.group), g.collection, g.role.value, g.created_at.isoformat(timespec="seconds"))
    console.print(table)


async def set_groups_in_store(doc_id: str, groups: tuple[str, ...], collection: str) -> bool:
    """Set the groups of a stored document in the configured store; whether it is stored there."""
    async with settings_store(Settings()) as store:
        return await document_groups_port(store).set_document_groups(doc_id, groups, collection)


@access_app.command("set-groups")
def set_groups(
    doc_id: Annotated[str, typer.Argument(help="The stored document's id (`rag docs list`).")],
    groups: Annotated[
        str, typer.Option("--groups", help="Comma-separated groups allowed to read it, e.g. a,b; empty: everyone.")
    ],
    collection: Annotated[str, typer.Option("--collection", help="The document's collection.")] = DEFAULT_COLLECTION,
) -> None:
    """Set the groups allowed to read a stored document (its chunks too, nothing re-embedded; cached answers built
    from its collection are not served again). Exit 1 when no such document is stored."""
    names = split_groups(groups)
    try:
        check_collection(collection)
    except ScopeError as exc:
        raise InputError(str(exc)) from None
    if not asyncio.run(set_groups_in_store(doc_id, names, collection)):
        raise InputError(f"no document {doc_id!r} in {collection!r}; `rag docs list` shows the documents")
    shown = ", ".join(names) if names else "everyone"
    console.print(f"{doc_id} ({collection}): readable by {shown}", markup=False, soft_wrap=True)
