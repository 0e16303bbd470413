"""The service's view of the grants of groups to collections (`tools.store.grants`, a table in the store's database):
what `rag access` and the admin API need of them (`GrantStore`), the grants over the process' store (`StoreGrants`,
`rag serve`) and those of the configured database (`settings_grants`, the CLI). The in-memory double is
`tools.in_memory_grants.InMemoryGrants`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Protocol, runtime_checkable

import asyncpg

from agent.config.settings import Settings
from tools.access import GrantBook, Role
from tools.records import Grant
from tools.store import VectorStore
from tools.store.errors import translated
from tools.store.grants import PostgresGrants, checked_grant

__all__ = ["Grant", "GrantStore", "PostgresGrants", "StoreGrants", "checked_grant", "settings_grants"]


@runtime_checkable
class GrantStore(GrantBook, Protocol):
    """The grants, readable and changeable: `PostgresGrants` or `InMemoryGrants`."""

    async def grant(self, group: str, collection: str, role: Role | str) -> Grant:
        """Give `group` `role` in `collection` (replacing its role there).

        Raises:
            tools.access.AccessError / tools.scope.ScopeError: an invalid group, role or collection (named).
        """
        ...

    async def revoke(self, group: str, collection: str) -> bool:
        """Take `group`'s role in `collection` away; whether it held one."""
        ...

    async def list(self) -> list[Grant]:
        """Every grant, by group then collection."""
        ...


class StoreGrants:
    """The grants in the process' store (`PostgresGrants` over the store's pool, none of its own); the table is
    created on entry. A `GrantStore` once entered.

    Args:
        store: the process' store, connected before this is entered.
    """

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self.entered = False

    def _tables(self) -> PostgresGrants:
        return PostgresGrants(self.store.pool, self.store.acquire_timeout_s)

    @property
    def grants(self) -> PostgresGrants:
        """The grants table over the store's pool. Raises RuntimeError before entry."""
        if not self.entered:
            raise RuntimeError("StoreGrants is not entered")
        return self._tables()

    async def __aenter__(self) -> StoreGrants:
        await self._tables().setup()
        self.entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.entered = False

    async def roles_for(self, groups: Iterable[str]) -> Mapping[str, Role]:
        """See `PostgresGrants.roles_for`."""
        return await self.grants.roles_for(groups)

    async def grant(self, group: str, collection: str, role: Role | str) -> Grant:
        """See `PostgresGrants.grant`."""
        return await self.grants.grant(group, collection, role)

    async def revoke(self, group: str, collection: str) -> bool:
        """See `PostgresGrants.revoke`."""
        return await self.grants.revoke(group, collection)

    async def list(self) -> list[Grant]:
        """See `PostgresGrants.list`."""
        return await self.grants.list()


@asynccontextmanager
async def settings_grants(settings: Settings) -> AsyncIterator[PostgresGrants]:
    """The grants of the configured database (table created when missing) over a small pool of their own, closed at
    exit.

    Raises:
        StoreUnavailableError / StoreQueryError: Postgres refused or is unreachable.
    """
    dsn = settings.resolved_database_url()
    with translated(f"connecting to Postgres at {dsn} for access grants"):
        pool = await asyncpg.create_pool(
            dsn,
            min_size=0,
            max_size=2,
            statement_cache_size=settings.db_statement_cache_size,
            command_timeout=settings.db_command_timeout_s,
        )
    try:
        grants = PostgresGrants(pool, settings.db_acquire_timeout_s)
        await grants.setup()
        yield grants
    finally:
        await pool.close()
