"""What the contract suites hold of one implementation (shared by the fixtures and the tests)."""

from __future__ import annotations

from agent.core.library import DocumentLibrary
from tools.in_memory_sink import InMemorySink
from tools.ingest import ChunkSink
from tools.retrieval import PassageSearch
from tools.store import VectorStore


class Documents:
    """One implementation of the two document ports over the same documents: the library that adds, lists and
    deletes them, and the passage search over what it stored."""

    def __init__(self, library: DocumentLibrary, search: PassageSearch) -> None:
        self.library = library
        self.search = search


async def stored_chunk_texts(sink: ChunkSink, collection: str, doc_id: str) -> list[str]:
    """The texts of the chunks stored for (collection, doc_id), by chunk index; empty when it is not stored (read
    past the port: the sink's protocol has no chunk reads)."""
    if isinstance(sink, InMemorySink):
        doc = sink.documents.get((collection, doc_id))
        return [] if doc is None else [c.text for c in doc.chunks]
    assert isinstance(sink, VectorStore)
    rows = await sink.pool.fetch(
        "SELECT c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE d.collection = $1 AND d.doc_id = $2 ORDER BY c.chunk_index",
        collection,
        doc_id,
    )
    return [r["text"] for r in rows]
