"""API keys scoped to collections, in the store's database: tokens handed out once, stored only as a hash, revocable.

Table (created idempotently by `PostgresKeys.setup`):
`api_keys(id bigserial, name text, hash text UNIQUE, collections text[], created_at timestamptz, revoked_at
timestamptz, requests_per_minute integer, tokens_per_day bigint)`; the two quota columns (NULL: the service's default,
`KEY_REQUESTS_PER_MINUTE` / `KEY_TOKENS_PER_DAY`) are added to an older table by the same set-up. A key's holder sees
and writes only the documents, answers and jobs of its `collections` (`tools.scope`). Every operation is one
transaction (`tools.store.pools.transaction`), and Postgres' failures come out as the store's errors
(`StoreUnavailableError` while Postgres is down or restarting, `StoreBusyError`, `StoreQueryError`), never asyncpg's.
The service's view of the keys (the cache, the admin key) is `agent.core.keys`.

Why a plain SHA-256 and no slow KDF (bcrypt, scrypt, Argon2): a token is 32 bytes from `secrets` (256 bits of
entropy). Slow hashes exist to make guessing *low-entropy* secrets (passwords) expensive after the hash table leaks;
guessing a 256-bit random value is out of reach at any hash speed, so a fast hash loses nothing and lets a request
find its key with one indexed equality look-up (`hash = $1`) instead of verifying every stored key. The look-up by
hash also leaks nothing through timing: the compared value is a hash the caller cannot steer byte by byte.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from enum import Enum

import asyncpg

from tools.access import check_group
from tools.records import ApiKey
from tools.scope import ScopeError, check_collection
from tools.store.errors import translated
from tools.store.pools import PooledTables
from tools.store.usage import PostgresUsage

TOKEN_PREFIX = "rag_"
"""Every token starts with it (recognisable in logs and secret scanners)."""
TOKEN_BYTES = 32
"""Random bytes of a token (256 bits, `secrets.token_urlsafe`)."""

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS api_keys (
    id bigserial PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    hash text NOT NULL UNIQUE,
    collections text[] NOT NULL CHECK (cardinality(collections) >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS requests_per_minute integer CHECK (requests_per_minute >= 1);
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS tokens_per_day bigint CHECK (tokens_per_day >= 1);
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS group_name text;
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_collections_check;
DO $$ BEGIN
    ALTER TABLE api_keys ADD CONSTRAINT api_keys_scope_check
        CHECK (cardinality(collections) >= 1 OR group_name IS NOT NULL);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$
"""
KEYS_LOCK = 4245
"""Advisory lock key that serialises concurrent set-up of the table."""

_COLUMNS = "id, name, collections, created_at, revoked_at, requests_per_minute, tokens_per_day, group_name"


def new_token() -> str:
    """A fresh token: `rag_` + 32 random bytes, URL-safe base64 (43 characters)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """sha256 hex of the token's UTF-8 bytes: what the table stores (see the module docstring)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_collections(names: Sequence[str]) -> tuple[str, ...]:
    """The distinct valid collection names of `names`, sorted.

    Raises:
        tools.scope.ScopeError: none given, or an invalid name (named).
    """
    if isinstance(names, str) or not names:
        raise ScopeError(f"collections={names!r}; expected one or more collection names, e.g. a,b")
    return tuple(sorted({check_collection(n.strip()) for n in names}))


def _key(row: asyncpg.Record) -> ApiKey:
    return ApiKey(
        row["id"],
        row["name"],
        tuple(row["collections"]),
        row["created_at"],
        row["revoked_at"],
        row["requests_per_minute"],
        row["tokens_per_day"],
        row["group_name"],
    )


class Keep(Enum):
    """`KEEP`: a quota `PostgresKeys.update_limits` leaves as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


def key_scope(collections: Sequence[str], group: str | None) -> tuple[tuple[str, ...], str | None]:
    """A new key's (collections, group), checked: a key tied to a group may name no collection (it then uses the
    collections granted to its group); any other key names one or more.

    Raises:
        tools.scope.ScopeError: no collection and no group, or an invalid collection name.
        tools.access.AccessError: an invalid group name.
    """
    if group is not None:
        group = check_group(group)
        if not collections:
            return (), group
    return check_collections(collections), group


def check_limit(name: str, value: int | Keep | None) -> int | Keep | None:
    """`value` when it is a valid quota (None, `KEEP`, or at least 1).

    Raises:
        tools.scope.ScopeError: a number below 1 (named).
    """
    if isinstance(value, int) and value < 1:
        raise ScopeError(f"{name}={value}; expected at least 1, or `default` for the service's default")
    return value


class PostgresKeys(PooledTables):
    """API keys in Postgres over an asyncpg pool; every operation is one transaction (`tools.store.pools`), and
    Postgres failures come out as the store's errors (`StoreUnavailableError`, `StoreBusyError`, ...).

    Args: those of `tools.store.pools.PooledTables` (pool, acquire_timeout_s).
    """

    @property
    def usage(self) -> PostgresUsage:
        """The keys' usage (`tools.store.usage`) over the same pool."""
        return PostgresUsage(self.pool, self.acquire_timeout_s)

    async def setup(self) -> None:
        """Create the table when missing (idempotent; concurrent callers serialised by an advisory lock)."""
        async with self._tx("creating the api_keys table") as conn:
            await conn.execute(f"SELECT pg_advisory_xact_lock({KEYS_LOCK})")
            await conn.execute(SCHEMA_SQL)

    async def create(
        self,
        collections: Sequence[str],
        name: str = "",
        requests_per_minute: int | None = None,
        tokens_per_day: int | None = None,
        group: str | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key for `collections` with its own quotas (None: the service's defaults), tied to `group` when
        given (then `collections` may be empty: the group's grants decide); returns it and its token (the only time
        the token exists outside the caller: the table keeps its hash).

        Raises:
            tools.scope.ScopeError: no collection (and no group), an invalid collection name, or a quota below 1.
            tools.access.AccessError: an invalid group name.
        """
        names, group = key_scope(collections, group)
        check_limit("requests_per_minute", requests_per_minute)
        check_limit("tokens_per_day", tokens_per_day)
        token = new_token()
        async with self._tx("creating an API key") as conn:
            row = await conn.fetchrow(
                "INSERT INTO api_keys (name, hash, collections, requests_per_minute, tokens_per_day, group_name) "
                f"VALUES ($1, $2, $3, $4, $5, $6) RETURNING {_COLUMNS}",
                name,
                token_hash(token),
                list(names),
                requests_per_minute,
                tokens_per_day,
                group,
            )
        assert row is not None
        return _key(row), token

    async def list(self) -> list[ApiKey]:
        """Every key, revoked ones included, by id."""
        async with self._tx("listing API keys", "BEGIN READ ONLY") as conn:
            return [_key(r) for r in await conn.fetch(f"SELECT {_COLUMNS} FROM api_keys ORDER BY id")]

    async def revoke(self, key_id: int) -> ApiKey | None:
        """Revoke key `key_id` (its token is refused from the next request on); the key, or None when there is no
        such key. Revoking a revoked key keeps its first revocation time."""
        async with self._tx("revoking an API key") as conn:
            row = await conn.fetchrow(
                f"UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING {_COLUMNS}",
                key_id,
            )
        return None if row is None else _key(row)

    async def update_limits(
        self, key_id: int, requests_per_minute: int | Keep | None = KEEP, tokens_per_day: int | Keep | None = KEEP
    ) -> ApiKey | None:
        """Set key `key_id`'s own quotas (None clears one: the service's default applies; `KEEP` leaves it); the key,
        or None when there is no such key. A running `rag serve` applies them within `API_KEYS_CACHE_S`.

        Raises:
            tools.scope.ScopeError: a quota below 1.
        """
        check_limit("requests_per_minute", requests_per_minute)
        check_limit("tokens_per_day", tokens_per_day)
        async with self._tx("changing an API key's quotas") as conn:
            row = await conn.fetchrow(
                "UPDATE api_keys SET "
                "requests_per_minute = CASE WHEN $2 THEN requests_per_minute ELSE $3 END, "
                "tokens_per_day = CASE WHEN $4 THEN tokens_per_day ELSE $5 END "
                f"WHERE id = $1 RETURNING {_COLUMNS}",
                key_id,
                requests_per_minute is KEEP,
                None if requests_per_minute is KEEP else requests_per_minute,
                tokens_per_day is KEEP,
                None if tokens_per_day is KEEP else tokens_per_day,
            )
        return None if row is None else _key(row)

    async def holder(self, token: str) -> ApiKey | None:
        """The active key of `token` (one indexed look-up by its hash); None otherwise."""
        async with self._tx("checking an API key", "BEGIN READ ONLY") as conn:
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM api_keys WHERE hash = $1 AND revoked_at IS NULL", token_hash(token)
            )
        return None if row is None else _key(row)

    async def any_keys(self) -> bool:
        """Whether any key exists, revoked or not."""
        async with self._tx("checking for API keys", "BEGIN READ ONLY") as conn:
            return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM api_keys)"))


@asynccontextmanager
async def open_keys(
    dsn: str,
    *,
    acquire_timeout_s: float = 5.0,
    statement_cache_size: int = 100,
    command_timeout_s: float | None = 60.0,
    max_size: int = 2,
) -> AsyncIterator[PostgresKeys]:
    """The keys of the database at `dsn` (tables created when missing: `api_keys` and `key_usage`,
    `tools.store.usage`) over a small pool of their own, closed at exit.

    Raises:
        StoreUnavailableError / StoreQueryError: Postgres refused or is unreachable.
    """
    with translated(f"connecting to Postgres at {dsn} for API keys"):
        pool = await asyncpg.create_pool(
            dsn,
            min_size=0,
            max_size=max_size,
            statement_cache_size=statement_cache_size,
            command_timeout=command_timeout_s,
        )
    try:
        keys = PostgresKeys(pool, acquire_timeout_s)
        await keys.setup()
        await keys.usage.setup()
        yield keys
    finally:
        await pool.close()
