"""The in-memory collection honours a search scope with the store's semantics (collections, JSON equality of
metadata, source, ingest time) in search and document reads; fast tier, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.scope import SearchScope

DOCS = [
    SourceDocument("a", "Otters", "Otters eat fish.", "a.md", {"team": "bio", "year": 2019, "flag": True}),
    SourceDocument("b", "Herons", "Herons eat fish too.", "b.md", {"team": "chem", "year": "2019", "flag": 1}),
]
QUERY = "what eats fish"


async def found(collection: InMemoryCollection, scope: SearchScope | None) -> list[str]:
    return [p.doc_id for p in (await collection.search(QUERY, 5, scope)).passages]


async def test_search_and_reads_honour_every_filter_kind() -> None:
    collection = InMemoryCollection(DOCS[:1])
    await collection.add_documents(DOCS[1:], collection="birds")
    assert sorted(await found(collection, None)) == ["a", "b"]
    assert await found(collection, SearchScope(collections=("birds",))) == ["b"]
    assert await found(collection, SearchScope(collections=())) == []
    assert await found(collection, SearchScope.from_filter({"year": 2019})) == ["a"]  # 2019 is not "2019"
    assert await found(collection, SearchScope.from_filter({"flag": True})) == ["a"]  # true is not 1
    assert await found(collection, SearchScope.from_filter({"flag": 1})) == ["b"]
    assert sorted(await found(collection, SearchScope.from_filter({"team": ["bio", "chem"]}))) == ["a", "b"]
    assert await found(collection, SearchScope.from_filter({"source": "b.md"})) == ["b"]
    assert await found(collection, SearchScope.from_filter({"missing": 1})) == []
    now = datetime.now(UTC)
    assert await found(collection, SearchScope(ingested_after=now + timedelta(hours=1))) == []
    assert sorted(await found(collection, SearchScope(ingested_before=now + timedelta(hours=1)))) == ["a", "b"]
    assert await collection.get_document("b", SearchScope(collections=("birds",))) == ("Herons", "Herons eat fish too.")
    assert await collection.get_document("b", SearchScope(collections=("default",))) is None
    assert await collection.get_document("a", SearchScope.from_filter({"team": "chem"})) is None
