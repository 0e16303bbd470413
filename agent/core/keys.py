"""API keys scoped to collections: tokens handed out once, stored only as a hash, revocable.

Table (created idempotently by `PostgresKeys.setup`, in the store's database):
`api_keys(id bigserial, name text, hash text UNIQUE, collections text[], created_at timestamptz, revoked_at
timestamptz)`. A key's holder sees and writes only the documents, answers and jobs of its `collections`
(`tools.scope`); `API_KEY` (settings) stays the admin key of every collection.

Why a plain SHA-256 and no slow KDF (bcrypt, scrypt, Argon2): a token is 32 bytes from `secrets` (256 bits of
entropy). Slow hashes exist to make guessing *low-entropy* secrets (passwords) expensive after the hash table leaks;
guessing a 256-bit random value is out of reach at any hash speed, so a fast hash loses nothing and lets a request
find its key with one indexed equality look-up (`hash = $1`) instead of verifying every stored key. The look-up by
hash also leaks nothing through timing: the compared value is a hash the caller cannot steer byte by byte.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg
from cachetools import TTLCache

from agent.config.settings import Settings
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


class KeyRing(Protocol):
    """What the HTTP API needs of the keys: find the active key of a token, and whether any key was ever made."""

    async def holder(self, token: str) -> ApiKey | None:
        """The active (not revoked) key whose token is `token`; None otherwise."""
        ...

    async def any_keys(self) -> bool:
        """Whether the table holds any key, revoked or not (then every request needs a key)."""
        ...


class CachedKeys:
    """A `KeyRing` that remembers what it read for `ttl_s` seconds, so an authenticated request or one to a server
    without keys costs no Postgres round trip (the keys' own pool holds two connections, and every request asks).

    Remembered: the key found for a token (by its hash; a token without a key is asked again next time, so a new key
    works at once), for `ttl_s`: a revoked key keeps working until then; "no key exists", for `ttl_s`: the first key
    made is required from then on; "some key exists", for good, since keys are revoked, never deleted. Entries are
    held in `cachetools.TTLCache`s (at most `max_tokens` tokens).

    Args:
        keys: the keys read on a miss (`PostgresKeys`).
        ttl_s: `API_KEYS_CACHE_S`, >= 0; 0 reads `keys` every time.
        max_tokens: distinct tokens remembered at most (least recently used ones go first).
        timer: the caches' clock, seconds (default `time.monotonic`; tests pass their own).
    """

    def __init__(
        self, keys: KeyRing, ttl_s: float, max_tokens: int = 4096, timer: Callable[[], float] = time.monotonic
    ) -> None:
        self.keys = keys
        self.ttl_s = ttl_s
        self._holders: TTLCache[str, ApiKey] = TTLCache(maxsize=max_tokens, ttl=ttl_s, timer=timer)
        self._none_yet: TTLCache[str, bool] = TTLCache(maxsize=1, ttl=ttl_s, timer=timer)
        self._some = False

    async def holder(self, token: str) -> ApiKey | None:
        """See `PostgresKeys.holder`; a found key is remembered for `ttl_s`."""
        digest = token_hash(token)
        if (known := self._holders.get(digest)) is not None:
            return known
        key = await self.keys.holder(token)
        if key is not None and self.ttl_s > 0:
            self._holders[digest] = key
        return key

    async def any_keys(self) -> bool:
        """See `PostgresKeys.any_keys`; "none" is remembered for `ttl_s`, "some" for good."""
        if self._some:
            return True
        if self._none_yet.get("none"):
            return False
        self._some = await self.keys.any_keys()
        if not self._some and self.ttl_s > 0:
            self._none_yet["none"] = True
        return self._some


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


def settings_keys(settings: Settings) -> AbstractAsyncContextManager[PostgresKeys]:
    """`open_keys` on the configured database with the settings' acquire timeout, statement cache and timeout."""
    return open_keys(
        settings.resolved_database_url(),
        acquire_timeout_s=settings.db_acquire_timeout_s,
        statement_cache_size=settings.db_statement_cache_size,
        command_timeout_s=settings.db_command_timeout_s,
    )


@dataclass
class InMemoryKeys:
    """`PostgresKeys` in memory, for tests of the interfaces: the same tokens, hashes and revocation."""

    rows: dict[int, tuple[ApiKey, str]] = field(default_factory=dict)
    """id -> (key, token hash)."""

    async def create(self, collections: Sequence[str], name: str = "") -> tuple[ApiKey, str]:
        """See `PostgresKeys.create`."""
        token = new_token()
        key = ApiKey(len(self.rows) + 1, name, check_collections(collections), datetime.now(UTC))
        self.rows[key.id] = (key, token_hash(token))
        return key, token

    async def list(self) -> list[ApiKey]:
        """See `PostgresKeys.list`."""
        return [key for key, _ in sorted(self.rows.values(), key=lambda r: r[0].id)]

    async def revoke(self, key_id: int) -> ApiKey | None:
        """See `PostgresKeys.revoke`."""
        if key_id not in self.rows:
            return None
        key, digest = self.rows[key_id]
        if key.active:
            key = ApiKey(key.id, key.name, key.collections, key.created_at, datetime.now(UTC))
            self.rows[key_id] = (key, digest)
        return key

    async def holder(self, token: str) -> ApiKey | None:
        """See `PostgresKeys.holder`."""
        digest = token_hash(token)
        return next((k for k, h in self.rows.values() if h == digest and k.active), None)

    async def any_keys(self) -> bool:
        """See `PostgresKeys.any_keys`."""
        return bool(self.rows)
