"""The answer cache in Postgres: `PostgresAnswerCache`, entries in `answer_cache` keyed on a request digest and the
versions of the collections in the request's scope (`collection_versions`, bumped by a trigger on `documents` for
every ingest, replace and delete; both created by the store's schema set-up, `tools.store.schema.ANSWER_CACHE_SQL`).

- `lookup` reads the scope's versions, derives the key from them and the digest, and reads (and counts a hit on) the
  entry, in one statement: an entry stored before any change in the scope is never found again.
- `store` writes an entry under the key a `lookup` returned, drops expired entries and evicts the oldest beyond the
  bound, in one transaction.

The key is `sha256(digest || '|' || versions)` (hex), where `versions` is `name=version` of every collection of the
scope (every collection when unscoped), sorted and comma-separated; a collection that never held a document counts 0.

Read replicas: an answer's searches may read a replica up to `read_max_lag_s` behind the primary, where the versions
are read. A lookup therefore says whether the scope is `settled`: unchanged for longer than that lag (the trigger
runs at commit, so `changed_at` is about the commit time), so that every replica a search may use holds the version in
the key. An answer whose scope changed more recently is not stored (`PostgresAnswerCache.store` is not called).

Permissions: every entry records the permission set it was answered under (`access_key`, `tools.access.Access.key`;
the request digest covers it too, so two sets never share a key), and a restricted caller's look-up runs under
row-level security (`tools.store.access`): it finds only the entries of its own set.

Every operation is one transaction on the store's primary read pool, never the write pool (which queues behind the
documents' write lock during an ingest); Postgres' failures come out as the store's errors.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from tools.access import UNRESTRICTED, Access
from tools.records import CacheLookup
from tools.store import pools
from tools.store.records import Conn

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tools.store.vector_store import VectorStore

LOOKUP_SQL = """
WITH s AS (
    SELECT name FROM unnest($2::text[]) AS name
    UNION
    SELECT collection FROM collection_versions WHERE $2::text[] IS NULL
),
v AS (
    SELECT coalesce(string_agg(s.name || '=' || coalesce(cv.version, 0), ',' ORDER BY s.name), '') AS versions,
           max(cv.changed_at) AS changed_at
    FROM s LEFT JOIN collection_versions cv ON cv.collection = s.name
),
k AS (
    SELECT encode(sha256(convert_to($1::text || '|' || v.versions, 'UTF8')), 'hex') AS key,
           coalesce(v.changed_at < now() - make_interval(secs => $4::float8), true) AS settled
    FROM v
),
hit AS (
    UPDATE answer_cache e SET hits = e.hits + 1 FROM k
    WHERE e.key = k.key AND e.created_at > now() - make_interval(secs => $3::float8)
    RETURNING e.answer::text AS answer
)
SELECT k.key, k.settled, (SELECT answer FROM hit) AS answer FROM k
"""
"""$1 the request digest, $2 the scope's collections (NULL: every collection), $3 the TTL and $4 the settle time,
seconds: the key, whether the scope is settled, and the live entry's answer (NULL: none), its hit counted."""

STORE_SQL = """
INSERT INTO answer_cache (key, answer, access_key) VALUES ($1, $2::jsonb, $3)
ON CONFLICT (key) DO UPDATE SET answer = EXCLUDED.answer, access_key = EXCLUDED.access_key, created_at = now(), hits = 0
"""
EXPIRE_SQL = "DELETE FROM answer_cache WHERE created_at <= now() - make_interval(secs => $1::float8)"
EVICT_SQL = """
DELETE FROM answer_cache WHERE key IN (SELECT key FROM answer_cache ORDER BY created_at DESC, key OFFSET $1)
"""


class PostgresAnswerCache:
    """The answer cache over a connected `VectorStore`'s primary read pool (module docstring).

    Args:
        store: connected before the first call.
        ttl_s: longest time an entry is served after it was stored, seconds (`ANSWER_CACHE_TTL_S`).
        max_entries: most entries kept; a store evicts the oldest beyond it (`ANSWER_CACHE_MAX_ENTRIES`).

    Raises (every method): the store's errors (`StoreUnavailableError`, `StoreBusyError`, `StoreQueryError`).
    """

    def __init__(self, store: VectorStore, ttl_s: float, max_entries: int) -> None:
        if not ttl_s > 0 or max_entries < 1:
            raise ValueError(f"ttl_s={ttl_s}, max_entries={max_entries}; expected > 0 and >= 1")
        self.vectors = store
        self.ttl_s = float(ttl_s)
        self.max_entries = int(max_entries)

    def _transaction(self, action: str, access: Access = UNRESTRICTED) -> AbstractAsyncContextManager[Conn]:
        restricted = access.set_local_sql()
        begin = f"BEGIN; {restricted}" if restricted else "BEGIN"
        return pools.transaction(self.vectors.pool, self.vectors.acquire_timeout_s, action, begin)

    @property
    def settle_s(self) -> float:
        """How long a scope must be unchanged before its answers are stored, seconds: the replicas' lag bound
        (`DATABASE_READ_MAX_LAG_S`) when read replicas are configured, else 0."""
        return self.vectors.read_max_lag_s if self.vectors.read_urls else 0.0

    async def lookup(
        self, digest: str, collections: Sequence[str] | None, *, access: Access = UNRESTRICTED
    ) -> CacheLookup:
        """The key of `digest` over the current versions of `collections` (None: every collection), and the live
        entry stored under it (its hit count incremented), in one statement. A restricted `access` reads under
        row-level security: only the entries stored with its permission set (`Access.key`) can be found."""
        names = None if collections is None else sorted(set(collections))
        async with self._transaction("reading the answer cache", access) as conn:
            row = await conn.fetchrow(LOOKUP_SQL, digest, names, self.ttl_s, self.settle_s)
        assert row is not None  # an aggregate always returns one row
        answer = None if row["answer"] is None else json.loads(row["answer"])
        return CacheLookup(row["key"], answer, bool(row["settled"]))

    async def store(self, key: str, answer: dict[str, Any], *, access: Access = UNRESTRICTED) -> None:
        """Store `answer` (a JSON object) under `key` (from `lookup`), replacing an entry there, as an entry of
        `access`'s permission set (only callers of that set find it); then drop expired entries and the oldest
        beyond `max_entries`."""
        async with self._transaction("storing an answer") as conn:
            await conn.execute(STORE_SQL, key, json.dumps(answer), access.key)
            await conn.execute(EXPIRE_SQL, self.ttl_s)
            await conn.execute(EVICT_SQL, self.max_entries)

    async def entries(self) -> int:
        """Entries stored now, expired ones included until the next `store`."""
        async with self._transaction("counting cached answers") as conn:
            return int(await conn.fetchval("SELECT count(*) FROM answer_cache"))
