"""The answer cache's tables against the real Postgres: collection versions moved by every ingest, replace and delete
(and only in the collections touched), keys that follow them, expiry, eviction of the oldest, and the read-replica
rule."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.store_helpers import DIM, MODEL, record
from tools.store import VectorStore
from tools.store.answer_cache import PostgresAnswerCache

pytestmark = pytest.mark.stack

DIGEST = "d" * 64
ANSWER = {"answer": "Yes [1].", "citations": [{"doc_id": "a1", "chunk_id": "a1#0", "score": 0.9, "passage": 1}]}


@pytest.fixture
async def store(fresh_db: str) -> AsyncIterator[VectorStore]:
    async with VectorStore(fresh_db, MODEL, DIM) as opened:
        yield opened


async def versions(store: VectorStore) -> dict[str, int]:
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT collection, version FROM collection_versions")
    return {r["collection"]: r["version"] for r in rows}


async def test_every_ingest_replace_and_delete_moves_only_its_collections_version(store: VectorStore) -> None:
    assert await versions(store) == {}
    await store.add_documents([record("a1", ["one"]), record("a2", ["two"])], collection="alpha")
    first = await versions(store)
    assert set(first) == {"alpha"} and first["alpha"] >= 1
    await store.add_documents([record("a1", ["one"])], collection="alpha")  # same hash: skipped, nothing written
    assert await versions(store) == first
    await store.add_documents([record("b1", ["three"])], collection="beta")
    second = await versions(store)
    assert second["alpha"] == first["alpha"] and second["beta"] >= 1
    await store.add_documents([record("a1", ["one, revised"], version="2")], collection="alpha")  # replace
    third = await versions(store)
    assert third["alpha"] > second["alpha"] and third["beta"] == second["beta"]
    await store.delete_documents(["a2"], collections=["alpha"])
    fourth = await versions(store)
    assert fourth["alpha"] > third["alpha"] and fourth["beta"] == third["beta"]


async def test_a_key_changes_with_any_write_in_its_scope_and_only_there(store: VectorStore) -> None:
    cache = PostgresAnswerCache(store, ttl_s=3600, max_entries=100)
    await store.add_documents([record("a1", ["one"])], collection="alpha")
    alpha = await cache.lookup(DIGEST, ["alpha"])
    everything = await cache.lookup(DIGEST, None)
    assert alpha.answer is None and alpha.settled
    await cache.store(alpha.key, ANSWER)
    hit = await cache.lookup(DIGEST, ["alpha"])
    assert hit.key == alpha.key and hit.answer == ANSWER
    assert (await cache.lookup(DIGEST, ["alpha", "beta"])).answer is None  # beta counts too (at 0): another key

    await store.add_documents([record("b1", ["two"])], collection="beta")  # outside the scope
    assert (await cache.lookup(DIGEST, ["alpha"])).answer == ANSWER
    assert (await cache.lookup(DIGEST, None)).key != everything.key  # the unscoped key sees every collection

    await store.add_documents([record("a2", ["three"])], collection="alpha")
    after = await cache.lookup(DIGEST, ["alpha"])
    assert after.key != alpha.key and after.answer is None
    async with store.pool.acquire() as conn:
        assert await conn.fetchval("SELECT hits FROM answer_cache WHERE key = $1", alpha.key) == 2


async def test_expired_entries_are_not_served_and_the_oldest_are_evicted(store: VectorStore) -> None:
    cache = PostgresAnswerCache(store, ttl_s=3600, max_entries=3)
    keys = [(await cache.lookup(f"{i:064d}", None)).key for i in range(5)]
    for key in keys:
        await cache.store(key, ANSWER)
    assert await cache.entries() == 3
    assert [(await cache.lookup(f"{i:064d}", None)).answer is not None for i in range(5)] == [False] * 2 + [True] * 3
    async with store.pool.acquire() as conn:
        await conn.execute("UPDATE answer_cache SET created_at = now() - interval '2 hours' WHERE key = $1", keys[4])
    assert (await cache.lookup(f"{4:064d}", None)).answer is None
    await cache.store(keys[0], ANSWER)
    async with store.pool.acquire() as conn:
        kept = {r["key"] for r in await conn.fetch("SELECT key FROM answer_cache")}
    assert kept == {keys[2], keys[3], keys[0]}  # the expired one is gone


async def test_with_read_replicas_a_scope_changed_within_their_lag_is_not_settled(fresh_db: str) -> None:
    async with VectorStore(fresh_db, MODEL, DIM, read_urls=[fresh_db], read_max_lag_s=60) as store:
        cache = PostgresAnswerCache(store, ttl_s=3600, max_entries=10)
        assert (await cache.lookup(DIGEST, ["alpha"])).settled  # never written: nothing to wait for
        await store.add_documents([record("a1", ["one"])], collection="alpha")
        assert not (await cache.lookup(DIGEST, ["alpha"])).settled
        async with store.pool.acquire() as conn:
            await conn.execute("UPDATE collection_versions SET changed_at = now() - interval '2 minutes'")
        assert (await cache.lookup(DIGEST, ["alpha"])).settled


async def test_the_schema_set_up_is_idempotent(store: VectorStore, fresh_db: str) -> None:
    async with VectorStore(fresh_db, MODEL, DIM):
        pass
    conn = await asyncpg.connect(fresh_db)
    try:
        triggers = await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'documents_collection_version'"
        )
    finally:
        await conn.close()
    assert triggers == 1
