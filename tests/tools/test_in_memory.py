"""The in-memory collection behaves like the store where callers can tell: search contract, idempotent adds,
listing and deleting by id or source. Pure logic (the real store: test_store_documents.py)."""

from __future__ import annotations

import pytest

from tools.in_memory import InMemoryCollection, hashed_vector
from tools.ingest import SourceDocument
from tools.retrieval import PassageSearch
from tools.retrieval_config import RETRIEVAL_MODES, RetrievalConfig, RetrievalMode


def doc(doc_id: str, text: str, source: str = "s") -> SourceDocument:
    return SourceDocument(doc_id, "", text, source, {})


DOCS = [doc("a", "zebra stripes confuse flies"), doc("b", "a giraffe eats acacia leaves", "x"), doc("c", "aardvark")]


@pytest.mark.parametrize("mode", RETRIEVAL_MODES)
async def test_search_numbers_passages_best_first_with_their_dense_cosine(mode: RetrievalMode) -> None:
    collection: PassageSearch = InMemoryCollection(DOCS, RetrievalConfig(mode=mode))
    found = await collection.search("zebra stripes", 2)
    assert [p.number for p in found.passages] == list(range(1, len(found.passages) + 1))
    assert found.passages[0].doc_id == "a" and found.passages[0].chunk_id == "a#0"
    expected = float(hashed_vector("zebra stripes") @ hashed_vector("zebra stripes confuse flies"))
    assert found.passages[0].dense_score == pytest.approx(expected) and 0 < expected < 1
    assert set(found.timings_ms) == {"embed", "search"}
    with pytest.raises(ValueError, match="query is empty"):
        await collection.search(" ", 2)
    with pytest.raises(ValueError, match="top_k=0"):
        await collection.search("zebra", 0)


async def test_full_text_finds_only_chunks_sharing_a_word() -> None:
    found = await InMemoryCollection(DOCS, RetrievalConfig(mode="full_text")).search("giraffe neck", 3)
    assert [p.doc_id for p in found.passages] == ["b"]


async def test_adds_are_idempotent_and_deletes_go_by_id_or_source() -> None:
    collection = InMemoryCollection(DOCS)
    counts = await collection.add_documents([doc("a", "zebra stripes confuse flies"), doc("d", "okapi")])
    assert (counts.added, counts.skipped, counts.chunks) == (1, 1, 1)
    assert (await collection.add_documents([doc("a", "changed text")])).added == 1
    assert [d.doc_id for d in await collection.list_documents(limit=2, offset=1)] == ["b", "c"]
    assert await collection.get_document("a") == ("", "changed text") and await collection.get_document("z") is None
    assert await collection.delete_documents(["c", "nope"], source="x") == ["b", "c"]
    assert await collection.count() == (2, 2)
