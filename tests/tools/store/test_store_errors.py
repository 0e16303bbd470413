"""The store's errors against a real Postgres that is stopped, restarted and broken: every method raises the
store's own types (never asyncpg's), and works again once Postgres is back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agent.config.settings import Settings
from agent.core.failures import describe
from infra import postgres
from infra.config import StackConfig
from tests.store_helpers import DIM, MODEL, own_postgres, record, unit_vector
from tools.errors import StoreError, StoreQueryError, StoreUnavailableError
from tools.records import JobFile, StagedDocument
from tools.store import VectorStore
from tools.store.jobs import PostgresJobQueue
from tools.store.keys import PostgresKeys
from tools.store.staging import commit_staged, resume_point, stage_chunks


@pytest.fixture(scope="module")
def pg(settings: Settings, postgres_url: str, server_root: Path) -> Iterator[Settings]:
    """A Postgres of this module's own (this module stops it); `postgres_url` marks the module `stack`."""
    with own_postgres(settings, server_root, "store-errors") as own:
        yield own


@pytest.fixture
async def store(pg: Settings) -> AsyncIterator[VectorStore]:
    postgres.start(StackConfig.of(pg))  # a test may have left it stopped
    async with VectorStore(pg.resolved_database_url(), MODEL, DIM, acquire_timeout_s=5) as st:
        await st.delete_documents([d.doc_id for d in await st.list_documents()])
        await st.add_documents([record("kept", ["zebra stripes and okapi"])])
        yield st


def operations(store: VectorStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One call of every public method of the store."""
    query = unit_vector(1)
    return {
        "add_documents": lambda: store.add_documents([record("new", ["giraffe neck"])]),
        "delete_documents": lambda: store.delete_documents(["kept"]),
        "stored_versions": lambda: store.stored_versions(["kept"]),
        "list_documents": lambda: store.list_documents(),
        "document_page": lambda: store.document_page(10),
        "count": lambda: store.count(),
        "dense_search": lambda: store.dense_search(query, 5),
        "dense_search_filtered": lambda: store.dense_search(query, 5, metadata_filter={"a": 1}),
        "dense_search_ef": lambda: store.dense_search(query, 5, ef_search=300),
        "full_text_bm25": lambda: store.full_text_search("zebra okapi", 5, rank="bm25"),
        "full_text_ts_rank_cd": lambda: store.full_text_search("zebra okapi", 5),
        "cosine_similarities": lambda: store.cosine_similarities(query, ["kept#0"]),
        "get_document": lambda: store.get_document("kept"),
        "rebuild_full_text": lambda: store.rebuild_full_text(),
    }


async def test_every_operation_is_store_unavailable_while_postgres_is_down_then_works(
    store: VectorStore, pg: Settings
) -> None:
    assert (await store.count())[0] == 1  # the pool holds open connections when the server goes away
    postgres.stop(StackConfig.of(pg))
    try:
        for name, call in operations(store).items():
            with pytest.raises(StoreUnavailableError) as info:
                await call()
            assert not isinstance(info.value, asyncpg.PostgresError | asyncpg.InterfaceError), name
            failure = describe(info.value)
            assert failure is not None and (failure.kind, failure.retryable) == ("postgres_unavailable", True), name
    finally:
        postgres.start(StackConfig.of(pg))
    for call in operations(store).values():
        await call()  # the pool reconnects: nothing to do for the caller
    assert [d.doc_id for d in await store.list_documents()] == ["new"]


def table_operations(store: VectorStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One call of each operation on the service's other tables (jobs, staged chunks, API keys), in an order that
    works: a staged chunk is committed after it is staged."""
    jobs, keys = PostgresJobQueue(store.pool, acquire_timeout_s=5), PostgresKeys(store.pool, acquire_timeout_s=5)
    big = StagedDocument("big", "hash-1", "Big", "test", {})
    row = ("default", "big", "hash-1", 0, "okapi habitat", 3, unit_vector(2), "{}")
    return {
        "jobs.setup": jobs.setup,
        "jobs.submit": lambda: jobs.submit([JobFile("a.txt", b"okapi")]),
        "jobs.claim": lambda: jobs.claim("w", 60),
        "jobs.list": lambda: jobs.list(),
        "jobs.get": lambda: jobs.get(1),
        "keys.setup": keys.setup,
        "keys.create": lambda: keys.create(["default"]),
        "keys.any_keys": keys.any_keys,
        "staging.resume_point": lambda: resume_point(store, big, "default"),
        "staging.stage_chunks": lambda: stage_chunks(store, [row]),
        "staging.commit_staged": lambda: commit_staged(store, big, "default"),
    }


async def test_the_jobs_staging_and_keys_tables_are_store_unavailable_while_postgres_is_down_then_work(
    store: VectorStore, pg: Settings
) -> None:
    postgres.stop(StackConfig.of(pg))
    try:
        for name, call in table_operations(store).items():
            with pytest.raises(StoreUnavailableError) as info:
                await call()
            assert not isinstance(info.value, asyncpg.PostgresError | asyncpg.InterfaceError | OSError), name
    finally:
        postgres.start(StackConfig.of(pg))
    results = {name: await call() for name, call in table_operations(store).items()}
    assert results["staging.commit_staged"] == 1 and results["keys.any_keys"] is True
    assert [d.doc_id for d in await store.list_documents()] == ["big", "kept"]


async def test_connecting_to_a_stopped_postgres_is_store_unavailable(pg: Settings) -> None:
    url = pg.resolved_database_url()
    postgres.stop(StackConfig.of(pg))
    try:
        with pytest.raises(StoreUnavailableError, match="connecting to Postgres"):
            await VectorStore(url, MODEL, DIM).connect()
    finally:
        postgres.start(StackConfig.of(pg))


async def test_a_failing_statement_is_a_store_query_error(store: VectorStore) -> None:
    async with store.pool.acquire() as conn:
        await conn.execute("ALTER TABLE bm25_lexicon RENAME TO bm25_lexicon_moved")
    try:
        with pytest.raises(StoreQueryError, match="bm25_lexicon") as info:
            await store.full_text_search("zebra", 5, rank="bm25")
        failure = describe(info.value)
        assert failure is not None and (failure.kind, failure.retryable) == ("postgres_error", False)
        with pytest.raises(StoreQueryError):  # the write's transaction is rolled back: nothing half-written
            await store.add_documents([record("half", ["zebra crossing"])])
        assert [d.doc_id for d in await store.list_documents()] == ["kept"]
    finally:
        async with store.pool.acquire() as conn:
            await conn.execute("ALTER TABLE bm25_lexicon_moved RENAME TO bm25_lexicon")
    assert [h.doc_id for h in await store.full_text_search("zebra", 5, rank="bm25")] == ["kept"]


async def test_a_missing_vector_type_names_the_extension(store: VectorStore) -> None:
    async with store.pool.acquire() as conn:
        with pytest.raises(asyncpg.UndefinedObjectError) as info:
            await conn.execute("SELECT '[1,2]'::vector_missing")
    from tools.store.errors import translate

    translated = translate(info.value, "dense search")
    assert isinstance(translated, StoreQueryError) and "CREATE EXTENSION vector" in str(translated)
    assert isinstance(translated, StoreError)
