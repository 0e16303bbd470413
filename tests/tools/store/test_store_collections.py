"""Documents belong to collections, against the real Postgres + pgvector: (collection, doc_id) is a document's identity,
ingestion is idempotent per collection, and listings, counts, look-ups and deletes see only the collections asked
for. Also the migration of a store made before collections (UNIQUE (doc_id))."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.store_helpers import DIM, MODEL, record
from tools.errors import StoreError
from tools.scope import SearchScope
from tools.store import VectorStore


@pytest.fixture
async def store(fresh_db: str) -> AsyncIterator[VectorStore]:
    async with VectorStore(fresh_db, MODEL, DIM) as st:
        yield st


async def test_the_same_doc_id_is_two_documents_in_two_collections(store: VectorStore) -> None:
    assert (await store.add_documents([record("guide.md", ["zebra stripes", "okapi"])])).added == 1
    assert (await store.add_documents([record("guide.md", ["zebra stripes", "okapi"])], collection="b")).added == 1
    listed = await store.list_documents()
    assert [(d.doc_id, d.collection, d.chunks) for d in listed] == [("guide.md", "b", 2), ("guide.md", "default", 2)]
    chunk_ids = sorted(await store.pool.fetchval("SELECT array_agg(chunk_id) FROM chunks"))
    assert chunk_ids == ["b::guide.md#0", "b::guide.md#1", "guide.md#0", "guide.md#1"]
    assert await store.count() == (2, 4)
    assert await store.count(collections=["b"]) == (1, 2)
    assert await store.count(collections=["c"]) == (0, 0)


async def test_reading_a_doc_id_two_collections_hold_gives_one_document(store: VectorStore) -> None:
    """The agent's `get_document` with a key that sees both collections: one document's text, never the chunks of
    both interleaved; narrowed to a collection, that collection's."""
    await store.add_documents([record("guide.md", ["alpha one", "alpha two"])], collection="a")
    await store.add_documents([record("guide.md", ["beta one", "beta two", "beta three"], version="2")], collection="b")
    both = SearchScope(collections=("a", "b"))
    assert await store.get_document("guide.md", both) == ("title guide.md", "alpha one\nalpha two")
    assert await store.get_document("guide.md", SearchScope(collections=("b",))) == (
        "title guide.md",
        "beta one\nbeta two\nbeta three",
    )
    assert await store.get_document("guide.md") == ("title guide.md", "alpha one\nalpha two")


async def test_ingestion_is_idempotent_per_collection_and_replaces_only_there(store: VectorStore) -> None:
    await store.add_documents([record("x", ["alpha"])], collection="a")
    await store.add_documents([record("x", ["alpha"])], collection="b")
    assert (await store.add_documents([record("x", ["alpha"])], collection="a")).skipped == 1
    assert await store.stored_versions(["x"], "a") == {"x": "x-1"}
    assert await store.stored_versions(["x"]) == {}  # not in the default collection
    replaced = await store.add_documents([record("x", ["alpha", "beta"], version="2")], collection="a")
    assert (replaced.added, replaced.chunks) == (1, 2)
    assert {(d.collection, d.content_hash, d.chunks) for d in await store.list_documents()} == {
        ("a", "x-2", 2),
        ("b", "x-1", 1),
    }
    counts = await store.add_documents([], unchanged={"x": "x-1"}, collection="a")  # a holds x-2 now
    assert counts.missing == ("x",)


async def test_deletes_listings_and_look_ups_stay_in_their_collections(store: VectorStore) -> None:
    for collection in ("a", "b"):
        await store.add_documents(
            [record("shared", ["okapi"]), record(f"only-{collection}", ["zebra"])], collection=collection
        )
    page = await store.document_page(10, collections=["a"])
    assert [(d.doc_id, d.collection) for d in page.documents] == [("only-a", "a"), ("shared", "a")]
    assert page.total == 2
    assert await store.find_documents("only-b", collections=["a"]) == []
    assert [d.collection for d in await store.find_documents("shared")] == ["a", "b"]
    assert await store.delete_documents(["only-b", "shared"], collections=["a"]) == ["shared"]
    assert [(d.doc_id, d.collection) for d in await store.list_documents()] == [
        ("only-a", "a"),
        ("only-b", "b"),
        ("shared", "b"),
    ]
    assert await store.delete_documents(["shared"], collections=[]) == []
    assert await store.delete_documents(["only-a", "only-b"]) == ["only-a", "only-b"]  # None: every collection


async def test_keyset_pages_walk_every_document_once_across_collections(store: VectorStore) -> None:
    for collection in ("a", "b", "default"):
        await store.add_documents([record(f"d{i}", [f"text {i}"]) for i in range(5)], collection=collection)
    seen = [(d.doc_id, d.collection) async for d in store.iter_documents(page_size=2)]
    assert seen == sorted((f"d{i}", c) for i in range(5) for c in ("a", "b", "default"))
    mine = [(d.doc_id, d.collection) async for d in store.iter_documents(page_size=3, collections=["b"])]
    assert mine == [(f"d{i}", "b") for i in range(5)]


async def test_bad_collection_names_are_refused_before_anything_is_written(store: VectorStore) -> None:
    for bad in ("", "Upper", "-lead", "a b", "x" * 64):
        with pytest.raises(StoreError, match="collection"):
            await store.add_documents([record("x", ["alpha"])], collection=bad)
    with pytest.raises(StoreError, match="not one string"):
        await store.count(collections="ab")
    assert await store.count() == (0, 0)


async def test_a_store_made_before_collections_is_migrated(fresh_db: str) -> None:
    async with VectorStore(fresh_db, MODEL, DIM) as old:
        await old.add_documents([record("kept", ["zebra"])])
        await old.pool.execute(  # the schema of a version before collections
            "ALTER TABLE documents DROP CONSTRAINT documents_doc_id_collection_key, "
            "ADD CONSTRAINT documents_doc_id_key UNIQUE (doc_id)"
        )
        with pytest.raises(StoreError):
            await old.add_documents([record("kept", ["zebra"])], collection="b")
    async with VectorStore(fresh_db, MODEL, DIM) as store:
        assert (await store.add_documents([record("kept", ["zebra"])], collection="b")).added == 1
        assert [(d.doc_id, d.collection) for d in await store.list_documents()] == [("kept", "b"), ("kept", "default")]
        constraints = await store.pool.fetchval(
            "SELECT array_agg(conname::text ORDER BY conname) FROM pg_constraint "
            "WHERE conrelid = 'documents'::regclass AND contype = 'u'"
        )
        assert constraints == ["documents_doc_id_collection_key"]
