"""Concurrency of the store against the real Postgres (and the real Triton for the upload path): an upload racing a
delete decides its skips under the write lock, and reads never wait behind writers while acquiring a connection is
bounded. The interleavings are made by the test (a hook inside the upload, a held lock), never by a clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import asyncpg
import numpy as np
import numpy.typing as npt
import pytest

from agent.core.failures import describe
from evals.retrieval_eval import ensure_database
from tests.store_helpers import DIM, MODEL, record, unit_vector
from tools.embedder import TritonEmbedder
from tools.errors import StoreBusyError
from tools.ingest import IngestOptions, SourceDocument, ingest_documents
from tools.records import TextKind
from tools.store import VectorStore
from tools.store.writes import WRITE_LOCK

LIVENESS_S = 60.0
"""Bound on an operation that must not wait for the held lock (it takes milliseconds; a hang fails the test)."""


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[VectorStore]:
    url = await ensure_database(postgres_url, "test_store_concurrency")
    async with VectorStore(url, MODEL, DIM, 4, write_pool_size=2, acquire_timeout_s=0.5) as st:
        await st.delete_documents([d.doc_id for d in await st.list_documents()])
        yield st


class DeletingEmbedder:
    """The real embedder; before its first embed call it deletes `victim` through the store: the delete commits
    after the upload decided (before embedding) that the victim is stored unchanged, and before its write."""

    def __init__(self, inner: TritonEmbedder, store: VectorStore, victim: str) -> None:
        self.inner, self.store, self.victim = inner, store, victim
        self.deleted: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        if not self.deleted:
            self.deleted = await self.store.delete_documents([self.victim])
        return await self.inner.embed(texts, kind)


async def test_upload_racing_a_delete_stores_the_document_it_reported_unchanged(
    store: VectorStore, embedder: TritonEmbedder
) -> None:
    x = SourceDocument("x", "Okapi", "The okapi lives in the Ituri rainforest.", "upload", {})
    y = SourceDocument("y", "Zebra", "Zebras have black and white stripes.", "upload", {})
    assert (await ingest_documents([x], embedder, store, IngestOptions(128, 16))).added == 1
    racing = DeletingEmbedder(embedder, store, victim="x")
    counts = await ingest_documents([x, y], cast(TritonEmbedder, racing), store, IngestOptions(128, 16))
    assert racing.deleted == ["x"]  # the delete ran inside the upload, after its pre-check
    stored = {d.doc_id for d in await store.list_documents()}
    # The upload committed after the delete, so it must not report x as skipped while x is gone.
    assert (counts.added, counts.skipped, stored) == (2, 0, {"x", "y"})


async def test_skips_are_decided_in_the_write_transaction(store: VectorStore) -> None:
    await store.add_documents([record("a", ["alpha"]), record("b", ["beta"])])
    await store.delete_documents(["a"])
    counts = await store.add_documents([record("c", ["gamma"])], unchanged={"a": "a-1", "b": "b-1"})
    assert (counts.added, counts.skipped, counts.missing) == (1, 1, ("a",))
    counts = await store.add_documents([], unchanged={"b": "b-2"})  # b is stored with another hash
    assert (counts.added, counts.skipped, counts.missing) == (0, 0, ("b",))


async def waiting_for_lock(conn: asyncpg.Connection) -> int:
    """Transactions waiting for the writers' advisory lock."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted", WRITE_LOCK
        )
    )


async def test_reads_never_wait_behind_writers_and_a_full_write_pool_is_busy(store: VectorStore) -> None:
    await store.add_documents([record("kept", ["zebra stripes and okapi"])])
    holder = await asyncpg.connect(store.dsn)
    writers: list[asyncio.Task[list[str]]] = []
    try:
        async with holder.transaction():
            await holder.execute(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")  # a long write in progress
            writers = [asyncio.create_task(store.delete_documents([f"gone-{i}"])) for i in range(8)]
            for _ in range(int(LIVENESS_S / 0.05)):  # until both pooled writers wait for the lock
                if await waiting_for_lock(holder) >= store.write_pool_size:
                    break
                await asyncio.sleep(0.05)
            # The write pool is full of writers waiting for the lock: more writers are refused as busy ...
            done, _ = await asyncio.wait(writers, timeout=LIVENESS_S, return_when=asyncio.FIRST_EXCEPTION)
            busy = [t.exception() for t in done]
            assert len(busy) >= 1 and all(isinstance(e, StoreBusyError) for e in busy), busy
            failure = describe(cast(BaseException, busy[0]))
            assert failure is not None and (failure.kind, failure.retryable) == ("postgres_busy", True)
            # ... while every read answers, with the lock still held.
            query = unit_vector(3)
            reads = asyncio.gather(
                store.count(),
                store.dense_search(query, 5),
                store.full_text_search("zebra", 5, rank="bm25"),
                store.cosine_similarities(query, ["kept#0"]),
                store.get_document("kept"),
                store.list_documents(),
                store.document_page(10),
                store.stored_versions(["kept"]),
                *(store.dense_search(unit_vector(i), 3) for i in range(16)),  # more reads than read connections
            )
            results = await asyncio.wait_for(reads, LIVENESS_S)
            assert results[0] == (1, 1) and results[4] == ("title kept", "zebra stripes and okapi")
            assert await waiting_for_lock(holder) == store.write_pool_size
        outcomes = await asyncio.wait_for(asyncio.gather(*writers, return_exceptions=True), LIVENESS_S)
    finally:
        for task in writers:
            task.cancel()
        await holder.close()
    assert sum(o == [] for o in outcomes) == store.write_pool_size  # those holding a connection got the lock
    assert all(o == [] or isinstance(o, StoreBusyError) for o in outcomes)
