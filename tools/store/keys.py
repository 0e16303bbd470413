"""API keys scoped to collections, in the store's database: tokens handed out once, stored only as a hash, revocable.

Table (created idempotently by `PostgresKeys.setup`):
`api_keys(id bigserial, name text, hash text UNIQUE, collections text[], created_at timestamptz, revoked_at
timestamptz)`. A key's holder sees and writes only the documents, answers and jobs of its `collections`
(`tools.scope`). Every operation is one transaction (`tools.store.pools.transaction`), and Postgres' failures come out
as the store's errors (`StoreUnavailableError` while Postgres is down or restarting, `StoreBusyError`,
`StoreQueryError`), never asyncpg's. The service's view of the keys (the cache, the admin key) is `agent.core.keys`.

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
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tools.scope import ScopeError, check_collection
from tools.store.errors import translated
from tools.store.pools import transaction
from tools.store.records import Conn

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
)
"""
KEYS_LOCK = 4245
"""Advisory lock key that serialises concurrent set-up of the table."""

_COLUMNS = "id, name, collections, created_at, revoked_at"


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


@dataclass(frozen=True)
class ApiKey:
    """A stored key (never its token nor its hash): id, name, the collections it may use, when it was created and
    revoked (None: active)."""

    id: int
    name: str
    collections: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        """Not revoked."""
        return self.revoked_at is None

    def to_json(self) -> dict[str, Any]:
        """The key as JSON (`rag keys list --json`): times as ISO 8601."""
        return {
            "id": self.id,
            "name": self.name,
            "collections": list(self.collections),
            "created_at": self.created_at.isoformat(),
            "revoked_at": None if self.revoked_at is None else self.revoked_at.isoformat(),
        }


def _key(row: asyncpg.Record) -> ApiKey:
    return ApiKey(row["id"], row["name"], tuple(row["collections"]), row["created_at"], row["revoked_at"])


class PostgresKeys:
    """API keys in Postgres over an asyncpg pool; every operation is one transaction (`tools.store.pools`), and
    Postgres failures come out as the store's errors (`StoreUnavailableError`, `StoreBusyError`, ...).

    Args:
        pool: a connected pool on the store's database.
        acquire_timeout_s: longest wait for a pooled connection, seconds (`DB_ACQUIRE_TIMEOUT_S`).
    """

    def __init__(self, pool: asyncpg.Pool, acquire_timeout_s: float = 5.0) -> None:
        self.pool = pool
        self.acquire_timeout_s = acquire_timeout_s

    def _tx(self, action: str, begin: str = "BEGIN") -> AbstractAsyncContextManager[Conn]:
        return transaction(self.pool, self.acquire_timeout_s, action, begin)

    async def setup(self) -> None:
        """Create the table when missing (idempotent; concurrent callers serialised by an advisory lock)."""
        async with self._tx("creating the api_keys table") as conn:
            await conn.execute(f"SELECT pg_advisory_xact_lock({KEYS_LOCK})")
            await conn.execute(SCHEMA_SQL)

    async def create(self, collections: Sequence[str], name: str = "") -> tuple[ApiKey, str]:
        """A new key for `collections`; returns it and its token (the only time the token exists outside the
        caller: the table keeps its hash).

        Raises:
            tools.scope.ScopeError: no collection, or an invalid collection name.
        """
        names = check_collections(collections)
        token = new_token()
        async with self._tx("creating an API key") as conn:
            row = await conn.fetchrow(
                f"INSERT INTO api_keys (name, hash, collections) VALUES ($1, $2, $3) RETURNING {_COLUMNS}",
                name,
                token_hash(token),
                list(names),
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
    """The keys of the database at `dsn` (table created when missing) over a small pool of their own, closed at
    exit.

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
        yield keys
    finally:
        await pool.close()
