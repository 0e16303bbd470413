"""Listing and deleting stored documents against the real Postgres + pgvector."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from evals.retrieval_eval import ensure_database
from tests.bm25_stats import statistics
from tools.errors import StoreError
from tools.records import ChunkRecord, DocumentRecord
from tools.store import VectorStore

pytestmark = pytest.mark.stack

DIM = 384


def vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def doc(doc_id: str, source: str, texts: list[str], seed: int) -> DocumentRecord:
    chunks = [ChunkRecord(i, t, len(t.split()), vector(seed * 10 + i)) for i, t in enumerate(texts)]
    return DocumentRecord(doc_id, f"title {doc_id}", source, f"hash-{doc_id}-{len(texts)}", chunks)


@pytest.fixture
async def doc_store(postgres_url: str) -> AsyncIterator[VectorStore]:
    url = await ensure_database(postgres_url, "test_store_documents")
    async with VectorStore(url, "all-minilm-l6-v2", DIM) as store:
        await store.delete_documents([d.doc_id for d in await store.list_documents()])
        yield store


async def test_list_documents_pages_by_doc_id(doc_store: VectorStore) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    await doc_store.add_documents(
        [
            doc("b", "notes.md", ["zebra stripes", "okapi"], 1),
            doc("a", "notes.md", ["giraffe neck"], 2),
            doc("c", "other.txt", ["aardvark burrow"], 3),
        ]
    )
    listed = await doc_store.list_documents()
    assert [(d.doc_id, d.source, d.chunks, d.title) for d in listed] == [
        ("a", "notes.md", 1, "title a"),
        ("b", "notes.md", 2, "title b"),
        ("c", "other.txt", 1, "title c"),
    ]
    assert listed[1].content_hash == "hash-b-2"
    assert all(d.ingested_at.utcoffset() == timedelta(0) and d.ingested_at >= before for d in listed)
    assert [d.doc_id for d in await doc_store.list_documents(limit=1, offset=1)] == ["b"]
    assert await doc_store.list_documents(limit=5, offset=3) == []
    with pytest.raises(StoreError, match="offset=-1"):
        await doc_store.list_documents(offset=-1)


async def test_delete_by_ids_and_source_removes_chunks_from_search(doc_store: VectorStore) -> None:
    await doc_store.add_documents(
        [
            doc("a", "notes.md", ["giraffe neck"], 2),
            doc("b", "notes.md", ["zebra stripes", "okapi"], 1),
            doc("c", "other.txt", ["aardvark burrow"], 3),
            doc("d", "keep.txt", ["zebra crossing"], 4),
        ]
    )
    assert await doc_store.delete_documents(["c", "missing"], source="notes.md") == ["a", "b", "c"]
    assert [d.doc_id for d in await doc_store.list_documents()] == ["d"]
    assert await doc_store.count() == (1, 1)
    for seed in (20, 21, 30):  # the deleted chunks' own vectors
        assert {h.doc_id for h in await doc_store.dense_search(vector(seed), 10)} == {"d"}
    assert [h.doc_id for h in await doc_store.full_text_search("zebra okapi aardvark", 10, rank="bm25")] == ["d"]
    assert await doc_store.delete_documents(["a"]) == []
    assert await doc_store.delete_documents() == []
    with pytest.raises(StoreError, match="not one string"):
        await doc_store.delete_documents("d")


async def test_search_and_ingest_without_a_statement_cache(doc_store: VectorStore) -> None:
    """statement_cache_size=0 (PgBouncer in transaction mode): every statement is prepared unnamed."""
    async with VectorStore(doc_store.dsn, "all-minilm-l6-v2", DIM, statement_cache_size=0) as store:
        counts = await store.add_documents([doc("a", "notes.md", ["giraffe neck"], 2), doc("b", "x", ["zebra"], 1)])
        assert (counts.added, counts.chunks) == (2, 2)
        for _ in range(3):
            assert (await store.dense_search(vector(20), 1))[0].doc_id == "a"
            assert (await store.dense_search(vector(10), 1, metadata_filter={}))[0].doc_id == "b"
            assert [h.doc_id for h in await store.full_text_search("giraffe", 5, rank="bm25")] == ["a"]
        assert await store.delete_documents(["a"]) == ["a"]


async def test_concurrent_ingests_of_one_new_doc_id_are_serialised(doc_store: VectorStore) -> None:
    """Two pools ingest the same new document at once: the second waits for the first and sees its row."""
    async with VectorStore(doc_store.dsn, "all-minilm-l6-v2", DIM) as other:
        same = doc("n", "new.md", ["brand new text"], 5)
        changed = doc("n", "new.md", ["brand new text", "and more"], 5)
        results = await asyncio.gather(doc_store.add_documents([same]), other.add_documents([same]))
        assert sorted((r.added, r.skipped) for r in results) == [(0, 1), (1, 0)]
        results = await asyncio.gather(doc_store.add_documents([changed]), other.add_documents([same]))
        assert sum(r.added for r in results) >= 1  # the changed one replaces, in either order, without a clash
    listed = await doc_store.list_documents()
    assert [d.doc_id for d in listed] == ["n"]
    assert await doc_store.count() == (1, listed[0].chunks)
    stats = await statistics(doc_store)
    assert stats["maintained"] == stats["recount"]


async def test_document_pages_follow_a_keyset_cursor_with_a_total(doc_store: VectorStore) -> None:
    ids = [f"doc/{i:03d}" for i in range(25)]  # ids with `/`, as the CLI names files
    await doc_store.add_documents([doc(i, "pages.md", [f"text of {i}"], n) for n, i in enumerate(ids)])
    first = await doc_store.document_page(limit=10)
    assert [d.doc_id for d in first.documents] == ids[:10] and first.total == 25 and first.next_cursor
    await doc_store.add_documents([doc("doc/004b", "pages.md", ["inserted before the cursor"], 99)])
    second = await doc_store.document_page(limit=10, cursor=first.next_cursor)
    assert [d.doc_id for d in second.documents] == ids[10:20] and second.total == 26  # no row skipped or repeated
    third = await doc_store.document_page(limit=10, cursor=second.next_cursor)
    assert [d.doc_id for d in third.documents] == ids[20:] and third.next_cursor is None
    skipped = await doc_store.document_page(limit=5, cursor=first.next_cursor, offset=3)
    assert [d.doc_id for d in skipped.documents] == ids[13:18] and skipped.next_cursor
    streamed = [d.doc_id async for d in doc_store.iter_documents(page_size=4)]
    assert streamed == sorted([*ids, "doc/004b"])
    with pytest.raises(StoreError, match="cursor"):
        await doc_store.document_page(limit=10, cursor="%%%")
    with pytest.raises(StoreError, match="limit=0"):
        await doc_store.document_page(limit=0)


async def test_a_deep_document_page_is_an_index_range_scan(doc_store: VectorStore) -> None:
    await doc_store.add_documents([doc(f"p{i:04d}", "scan.md", ["x"], i) for i in range(300)])
    page = await doc_store.document_page(limit=10, cursor=(await doc_store.document_page(limit=280)).next_cursor)
    assert [d.doc_id for d in page.documents] == [f"p{i:04d}" for i in range(280, 290)]
    async with doc_store.pool.acquire() as conn:
        await conn.execute("ANALYZE documents")
        plan = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT d.doc_id FROM documents d WHERE d.doc_id > 'p0279' "
            "ORDER BY d.doc_id LIMIT 11"
        )
    root = json.loads(plan)[0]["Plan"]
    scan = root["Plans"][0]
    assert scan["Node Type"] in ("Index Scan", "Index Only Scan") and scan["Actual Rows"] == 11, scan


async def test_document_pages_match_a_title_or_id_case_insensitively_within_collections(
    doc_store: VectorStore,
) -> None:
    await doc_store.add_documents([doc(f"rep/{i:03d}", "r.md", ["x"], i) for i in range(30)])  # titles `title rep/..`
    await doc_store.add_documents(
        [
            DocumentRecord("hb.pdf", "Narwhal Handbook", "h.pdf", "hash-hb", [ChunkRecord(0, "x", 1, vector(500))]),
            DocumentRecord("odd", "50%_off \\ sale", "o.md", "hash-odd", [ChunkRecord(0, "x", 1, vector(501))]),
        ]
    )
    await doc_store.add_documents([doc("rep/secret", "s.md", ["x"], 600)], collection="secret")
    by_id = await doc_store.document_page(limit=10, matching="REP/01", collections=["default"])
    assert [d.doc_id for d in by_id.documents] == [f"rep/{i:03d}" for i in range(10, 20)] and by_id.total == 10
    assert by_id.next_cursor is None
    by_title = await doc_store.document_page(limit=10, matching="narwhal hand")
    assert [d.doc_id for d in by_title.documents] == ["hb.pdf"] and by_title.total == 1
    paged = await doc_store.document_page(limit=4, matching="rep/", offset=28)  # every collection: `rep/secret` too
    assert [(d.doc_id, d.collection) for d in paged.documents] == [
        ("rep/028", "default"),
        ("rep/029", "default"),
        ("rep/secret", "secret"),
    ]
    assert paged.total == 31 and paged.documents[0].chunks == 1 and paged.next_cursor is None
    scoped = await doc_store.document_page(limit=50, matching="rep/", collections=["default"])
    assert scoped.total == 30 and "rep/secret" not in {d.doc_id for d in scoped.documents}
    for literal in ("50%_", "\\ sale"):  # LIKE's wildcards and escape character are matched as text
        found = await doc_store.document_page(limit=10, matching=literal)
        assert [d.doc_id for d in found.documents] == ["odd"] and found.total == 1
    assert (await doc_store.document_page(limit=10, matching="%")).total == 1
    assert (await doc_store.document_page(limit=10, matching="")).total == 33


async def test_collection_counts_are_every_collection_or_exactly_those_asked(doc_store: VectorStore) -> None:
    await doc_store.add_documents([doc("a", "a.md", ["x"], 1), doc("b", "b.md", ["x"], 2)])
    await doc_store.add_documents([doc("c", "c.md", ["x"], 3)], collection="papers")
    assert await doc_store.collection_counts() == {"default": 2, "papers": 1}
    assert await doc_store.collection_counts(collections=["papers", "notes"]) == {"notes": 0, "papers": 1}
    assert await doc_store.collection_counts(collections=[]) == {}
