"""Grants of groups to collections, in the store's database: which role (`tools.access.Role`) the members of a group
hold in a collection (`rag access grant`, the admin API `/v1/access/grants`).

Table (created idempotently by `PostgresGrants.setup`, beside `api_keys`):
`access_grants(group_name text, collection text, role text CHECK (role IN ('reader', 'uploader', 'admin')),
created_at timestamptz, PRIMARY KEY (group_name, collection))`: one role per group and collection (granting again
replaces it). Every operation is one transaction (`tools.store.pools.transaction`); Postgres' failures come out as
the store's errors (`StoreUnavailableError`, `StoreBusyError`, `StoreQueryError`), never asyncpg's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import asyncpg

from tools.access import AccessError, Role, check_group, check_role
from tools.records import Grant
from tools.scope import check_collection
from tools.store.pools import PooledTables

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS access_grants (
    group_name text NOT NULL,
    collection text NOT NULL,
    role text NOT NULL CHECK (role IN ('reader', 'uploader', 'admin')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_name, collection)
)
"""
GRANTS_LOCK = 4247
"""Advisory lock key that serialises concurrent set-up of the table."""

_COLUMNS = "group_name, collection, role, created_at"


def _grant(row: asyncpg.Record) -> Grant:
    return Grant(row["group_name"], row["collection"], Role(row["role"]), row["created_at"])


def highest_roles(grants: Iterable[tuple[str, Role]]) -> dict[str, Role]:
    """Collection -> the highest of the roles `grants` (collection, role) give it, by collection name."""
    roles: dict[str, Role] = {}
    for collection, role in grants:
        held = roles.get(collection)
        if held is None or role.rank > held.rank:
            roles[collection] = role
    return dict(sorted(roles.items()))


def checked_grant(group: str, collection: str, role: str) -> tuple[str, str, Role]:
    """(group, collection, role) when each is valid.

    Raises:
        tools.access.AccessError: an invalid group or role (named).
        tools.scope.ScopeError: an invalid collection name.
    """
    return check_group(group), check_collection(collection), check_role(role)


class PostgresGrants(PooledTables):
    """The grants in Postgres over an asyncpg pool (a `tools.access.GrantBook`); every operation is one transaction.

    Args: those of `tools.store.pools.PooledTables` (pool, acquire_timeout_s).
    """

    async def setup(self) -> None:
        """Create the table when missing (idempotent; concurrent callers serialised by an advisory lock)."""
        async with self._tx("creating the access_grants table") as conn:
            await conn.execute(f"SELECT pg_advisory_xact_lock({GRANTS_LOCK})")
            await conn.execute(SCHEMA_SQL)

    async def roles_for(self, groups: Iterable[str]) -> Mapping[str, Role]:
        """Collection -> the highest role any of `groups` holds there (invalid names hold none).

        Raises:
            StoreError: the grants could not be read.
        """
        names = valid_groups(groups)
        if not names:
            return {}
        async with self._tx("reading access grants", "BEGIN READ ONLY") as conn:
            rows = await conn.fetch(
                "SELECT collection, role FROM access_grants WHERE group_name = ANY($1::text[])", list(names)
            )
        return highest_roles((r["collection"], Role(r["role"])) for r in rows)

    async def grant(self, group: str, collection: str, role: Role | str) -> Grant:
        """Give `group` `role` in `collection` (replacing the role it held there); the grant.

        Raises:
            tools.access.AccessError / tools.scope.ScopeError: an invalid group, role or collection (named).
        """
        group, collection, checked = checked_grant(group, collection, str(role))
        async with self._tx("granting access") as conn:
            row = await conn.fetchrow(
                "INSERT INTO access_grants (group_name, collection, role) VALUES ($1, $2, $3) "
                "ON CONFLICT (group_name, collection) DO UPDATE SET role = EXCLUDED.role "
                f"RETURNING {_COLUMNS}",
                group,
                collection,
                checked.value,
            )
        assert row is not None
        return _grant(row)

    async def revoke(self, group: str, collection: str) -> bool:
        """Take `group`'s role in `collection` away; whether it held one."""
        async with self._tx("revoking access") as conn:
            deleted = await conn.fetchval(
                "DELETE FROM access_grants WHERE group_name = $1 AND collection = $2 RETURNING 1",
                group.strip(),
                collection,
            )
        return deleted is not None

    async def list(self) -> list[Grant]:
        """Every grant, by group then collection."""
        async with self._tx("listing access grants", "BEGIN READ ONLY") as conn:
            rows = await conn.fetch(f"SELECT {_COLUMNS} FROM access_grants ORDER BY group_name, collection")
        return [_grant(r) for r in rows]


def valid_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """The valid names of `groups`, sorted, distinct (invalid ones dropped: a token's claim is not ours to refuse)."""
    return tuple(sorted({name for name in map(_valid_or_none, groups) if name is not None}))


def _valid_or_none(name: str) -> str | None:
    try:
        return check_group(name)
    except AccessError:
        return None
