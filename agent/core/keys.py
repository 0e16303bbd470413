"""The service's view of the API keys (`tools.store.keys`, the table in the store's database): what the HTTP API needs
of them (`KeyRing`), a cache of what it read (`CachedKeys`), the keys of the configured database (`settings_keys`),
the keys over the process' store (`StoreKeys`, `rag serve`), and keys in memory for tests of the interfaces
(`InMemoryKeys`). `API_KEY` (settings) stays the admin key of every
collection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from cachetools import TTLCache

from agent.config.settings import Settings
from agent.core.quotas import InMemoryUsage, UsageLog
from tools.records import ApiKey, Usage, UsageRow
from tools.store import VectorStore
from tools.store.keys import (
    KEEP,
    TOKEN_PREFIX,
    Keep,
    PostgresKeys,
    check_collections,
    check_limit,
    key_scope,
    new_token,
    open_keys,
    token_hash,
)
from tools.store.usage import report_json

__all__ = [
    "KEEP",
    "TOKEN_PREFIX",
    "ApiKey",
    "Keep",
    "KeyRing",
    "KeyStore",
    "PostgresKeys",
    "StoreKeys",
    "Usage",
    "UsageRow",
    "check_collections",
    "report_json",
]


class KeyRing(Protocol):
    """What the HTTP API needs of the keys: find the active key of a token, and whether any key was ever made."""

    async def holder(self, token: str) -> ApiKey | None:
        """The active (not revoked) key whose token is `token`; None otherwise."""
        ...

    async def any_keys(self) -> bool:
        """Whether the table holds any key, revoked or not (then every request needs a key)."""
        ...


class KeyStore(KeyRing, Protocol):
    """The keys of one server (`Services.keys`): a `KeyRing` and the keys' usage (`agent.core.quotas`)."""

    @property
    def usage(self) -> UsageLog:
        """Where the keys' usage is kept."""
        ...


class StoreKeys:
    """The API keys and their usage in the process' store (`tools.store.keys.PostgresKeys` over the store's read
    pool, no pool of their own); their tables are created on entry. A `KeyStore` once entered.

    Args:
        store: the process' store, connected before this is entered.
    """

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self._keys: PostgresKeys | None = None

    async def __aenter__(self) -> StoreKeys:
        keys = PostgresKeys(self.store.pool, self.store.acquire_timeout_s)
        await keys.setup()
        await keys.usage.setup()
        self._keys = keys
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._keys = None

    @property
    def keys(self) -> PostgresKeys:
        """The keys table. Raises RuntimeError before entry."""
        if self._keys is None:
            raise RuntimeError("StoreKeys is not entered")
        return self._keys

    @property
    def usage(self) -> UsageLog:
        """The keys' usage (`tools.store.usage.PostgresUsage`) over the same pool."""
        return self.keys.usage

    async def holder(self, token: str) -> ApiKey | None:
        """See `PostgresKeys.holder`."""
        return await self.keys.holder(token)

    async def any_keys(self) -> bool:
        """See `PostgresKeys.any_keys`."""
        return await self.keys.any_keys()


class CachedKeys:
    """A `KeyRing` that remembers what it read for `ttl_s` seconds, so an authenticated request or one to a server
    without keys costs no Postgres round trip (every request asks).

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
    usage: InMemoryUsage = field(default_factory=InMemoryUsage)
    """The keys' usage (`agent.core.quotas.InMemoryUsage`)."""

    async def create(
        self,
        collections: Sequence[str],
        name: str = "",
        requests_per_minute: int | None = None,
        tokens_per_day: int | None = None,
        group: str | None = None,
    ) -> tuple[ApiKey, str]:
        """See `PostgresKeys.create`."""
        token = new_token()
        check_limit("requests_per_minute", requests_per_minute)
        check_limit("tokens_per_day", tokens_per_day)
        names, group = key_scope(collections, group)
        key = ApiKey(
            len(self.rows) + 1, name, names, datetime.now(UTC), None, requests_per_minute, tokens_per_day, group
        )
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
            key = replace(key, revoked_at=datetime.now(UTC))
            self.rows[key_id] = (key, digest)
        return key

    async def update_limits(
        self, key_id: int, requests_per_minute: int | Keep | None = KEEP, tokens_per_day: int | Keep | None = KEEP
    ) -> ApiKey | None:
        """See `PostgresKeys.update_limits`."""
        check_limit("requests_per_minute", requests_per_minute)
        check_limit("tokens_per_day", tokens_per_day)
        if key_id not in self.rows:
            return None
        key, digest = self.rows[key_id]
        if not isinstance(requests_per_minute, Keep):
            key = replace(key, requests_per_minute=requests_per_minute)
        if not isinstance(tokens_per_day, Keep):
            key = replace(key, tokens_per_day=tokens_per_day)
        self.rows[key_id] = (key, digest)
        return key

    async def holder(self, token: str) -> ApiKey | None:
        """See `PostgresKeys.holder`."""
        digest = token_hash(token)
        return next((k for k, h in self.rows.values() if h == digest and k.active), None)

    async def any_keys(self) -> bool:
        """See `PostgresKeys.any_keys`."""
        return bool(self.rows)
