"""What the contract suites hold of one implementation (shared by the fixtures and the tests)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.core.library import DocumentLibrary
from tools.access import document_groups
from tools.conversations import ConversationLog
from tools.feedback import FeedbackLog
from tools.in_memory_conversations import InMemoryConversations
from tools.in_memory_feedback import InMemoryFeedback
from tools.in_memory_jobs import InMemoryJobQueue
from tools.in_memory_sink import InMemorySink
from tools.ingest import ChunkSink
from tools.ingest.ports import SyncLedger
from tools.jobs.ports import JobQueue
from tools.records import ChunkRecord, DocumentRecord
from tools.retrieval import PassageSearch
from tools.store import VectorStore
from tools.store.conversations import ConversationStore
from tools.store.feedback import PostgresFeedback
from tools.store.jobs import PostgresJobQueue

DIM = 384
"""The embedding width of the contract suites' documents (all-MiniLM-L6-v2's)."""


def vector(text: str) -> npt.NDArray[np.float32]:
    """A `(384,)` float32 unit vector seeded by `text`."""
    v = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def record(doc_id: str, *texts: str, content_hash: str | None = None) -> DocumentRecord:
    """A document of one chunk per text; its content hash is `content_hash` or derived from the texts."""
    chunks = [ChunkRecord(i, t, len(t.split()), vector(t), {"page": i + 1}) for i, t in enumerate(texts)]
    return DocumentRecord(doc_id, doc_id.title(), f"{doc_id}.md", content_hash or f"h-{'|'.join(texts)}", chunks)


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


async def stored_groups(sink: ChunkSink, collection: str, doc_id: str) -> tuple[list[str], dict[str, Any]]:
    """(groups, metadata) stored for (collection, doc_id) (read past the port); the store's chunks' groups are
    checked equal to the document's."""
    if isinstance(sink, InMemorySink):
        return list(sink.groups[collection, doc_id]), dict(sink.documents[collection, doc_id].metadata)
    assert isinstance(sink, VectorStore)
    row = await sink.pool.fetchrow(
        "SELECT d.groups, d.metadata::text AS metadata, array_agg(DISTINCT c.groups) AS chunk_groups "
        "FROM documents d JOIN chunks c ON c.document_id = d.id WHERE d.collection = $1 AND d.doc_id = $2 "
        "GROUP BY d.id",
        collection,
        doc_id,
    )
    assert row is not None and row["chunk_groups"] == [row["groups"]]
    return list(row["groups"]), json.loads(row["metadata"])


@dataclass(frozen=True)
class Ledger:
    """One implementation of `SyncLedger` and the chunk sink its documents are written to."""

    ledger: SyncLedger
    sink: ChunkSink


async def expire_lease(queue: JobQueue, job_id: int) -> None:
    """The lease of `job_id` ran out (its worker paused past it or died), set past the port: no clock is waited
    for."""
    if isinstance(queue, InMemoryJobQueue):
        queue.leases[job_id] = queue.clock() - 1.0
        return
    assert isinstance(queue, PostgresJobQueue)
    await queue.pool.execute("UPDATE ingest_jobs SET lease_until = now() - interval '1 second' WHERE id = $1", job_id)


async def stored_chunk(log: ConversationLog | FeedbackLog, doc_id: str, groups: list[str]) -> str:
    """Store a document `doc_id` of one chunk readable by `groups` beside the conversations or answer records (past
    the port: neither log has document writes); returns the chunk's id, for a citation to name."""
    if isinstance(log, InMemoryConversations | InMemoryFeedback):
        log.chunk_groups[f"{doc_id}#0"] = document_groups(groups)
        return f"{doc_id}#0"
    assert isinstance(log, ConversationStore | PostgresFeedback)
    store = log.store if isinstance(log, ConversationStore) else log.vectors
    doc = record(doc_id, f"text of {doc_id}")
    doc.metadata["groups"] = groups
    await store.add_documents([doc])
    return f"{doc_id}#0"
