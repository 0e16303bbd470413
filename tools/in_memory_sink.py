"""A chunk sink held in memory: the `tools.ingest.ports.ChunkSink` of the store, with no server. For the pipeline's
own logic in the fast tier (batch order, bad chunks, resume from staged chunks, repeated ids, per-file counts), as
`tools.in_memory.InMemoryCollection` is for what sits on top of retrieval; the contract suite
(`tests/contracts/test_chunk_sink.py`) holds it to the store's behaviour.

Semantics are the store's (`tools.store.VectorStore`): (collection, doc id) is a document's identity; a batch is
checked before anything is written (`tools.records.check_batch`) and then applied whole; the same content hash
is skipped, another replaces the stored version; staged chunks of another content hash are dropped when a run
resumes, and a staged run with a gap starts over.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from tools.access import document_groups
from tools.errors import StoreError
from tools.records import (
    ChunkRecord,
    DocumentRecord,
    Hashes,
    IngestCounts,
    StagedDocument,
    StagedRow,
    check_batch,
    split_groups,
)
from tools.scope import DEFAULT_COLLECTION

Key = tuple[str, str]
"""(collection, doc id): a stored document's identity."""


@dataclass
class InMemorySink:
    """Documents and staged chunks in dicts; safe within one event loop (no method awaits between reads and writes).

    Args:
        dim: the embedding width every chunk must have (e.g. 384 for all-MiniLM-L6-v2).

    Attributes:
        documents: the stored documents by (collection, doc id), their metadata without `groups`.
        groups: the groups allowed to read each stored document, by (collection, doc id) (the metadata's `groups`,
            `tools.records.split_groups`, as the store keeps them).
        staged: the staged chunks by (collection, doc id), then by chunk index.
        transactions: how many writes were applied (one per non-empty `add_documents`, `stage_chunks` and
            `commit_staged`), for tests that count them.
    """

    dim: int
    documents: dict[Key, DocumentRecord] = field(default_factory=dict)
    groups: dict[Key, tuple[str, ...]] = field(default_factory=dict)
    staged: dict[Key, dict[int, StagedRow]] = field(default_factory=dict)
    transactions: int = 0

    async def stored_versions(self, doc_ids: list[str], collection: str = DEFAULT_COLLECTION) -> dict[str, str]:
        """doc_id -> stored content hash of those of `doc_ids` stored in `collection`."""
        return {i: d.content_hash for i in doc_ids if (d := self.documents.get((collection, i))) is not None}

    async def chunk_vectors(
        self, doc_ids: list[str], collection: str = DEFAULT_COLLECTION
    ) -> dict[str, dict[str, npt.NDArray[np.float32]]]:
        """doc_id -> {sha256 hex of a chunk's text: its stored embedding} of those of `doc_ids` stored in
        `collection`."""
        return {
            i: {hashlib.sha256(c.text.encode("utf-8")).hexdigest(): c.embedding for c in d.chunks}
            for i in doc_ids
            if (d := self.documents.get((collection, i))) is not None
        }

    async def add_documents(
        self, docs: Sequence[DocumentRecord], unchanged: Hashes | None = None, *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Store `docs` in `collection` as one write (see `tools.ingest.ports.ChunkSink.add_documents`).

        Raises:
            StoreError: duplicate doc ids, or an embedding of the wrong shape or with non-finite values; nothing is
                written.
            AccessError: a document's `groups` is not valid; nothing is written.
        """
        unchanged = dict(unchanged or {})
        check_batch(docs, unchanged, self.dim)
        access = {d.doc_id: split_groups(d.doc_id, d.metadata) for d in docs}
        if not docs and not unchanged:
            return IngestCounts()
        stored = await self.stored_versions([*unchanged, *(d.doc_id for d in docs)], collection)
        missing = tuple(i for i, h in unchanged.items() if stored.get(i) != h)
        skipped = len(unchanged) - len(missing)
        added = chunks = 0
        for doc in docs:
            groups, metadata = access[doc.doc_id]
            self.groups[collection, doc.doc_id] = groups  # also of a skipped one: the same content, other groups
            if stored.get(doc.doc_id) == doc.content_hash:
                skipped += 1
                continue
            self.documents[collection, doc.doc_id] = replace(doc, metadata=metadata)
            added += 1
            chunks += len(doc.chunks)
        self.transactions += 1
        return IngestCounts(added=added, skipped=skipped, chunks=chunks, missing=missing)

    async def resume_point(self, doc: StagedDocument, collection: str = DEFAULT_COLLECTION) -> int:
        """Chunks of `doc` staged in `collection` by an earlier run (indexes 0..n-1: n); other hashes dropped, and a
        staged run with a gap starts over."""
        rows = self.staged.get((collection, doc.doc_id), {})
        kept = {i: r for i, r in rows.items() if r[2] == doc.content_hash}
        if sorted(kept) != list(range(len(kept))):
            kept = {}
        self.staged[collection, doc.doc_id] = kept
        return len(kept)

    async def stage_chunks(self, rows: Sequence[StagedRow]) -> None:
        """Stage `rows` as one write.

        Raises:
            StoreError: a chunk index already staged for its document (the store's primary key).
        """
        keys = [(r[0], r[1], r[3]) for r in rows]
        if len(set(keys)) != len(keys) or any(i in self.staged.get((c, d), {}) for c, d, i in keys):
            raise StoreError("a staged chunk is staged again; expected each (collection, doc id, chunk index) once")
        for row in rows:
            self.staged.setdefault((row[0], row[1]), {})[row[3]] = row
        self.transactions += 1

    async def commit_staged(self, doc: StagedDocument, collection: str = DEFAULT_COLLECTION) -> int:
        """Store the staged chunks of `doc` (its hash) in `collection`, replacing a stored version, and drop them;
        returns the chunks stored.

        Raises:
            AccessError: the document's `groups` is not valid; nothing is stored and the staged chunks stay.
        """
        groups, metadata = split_groups(doc.doc_id, doc.metadata)
        rows = self.staged.pop((collection, doc.doc_id), {})
        chunks = [
            ChunkRecord(index, text, tokens, vector, _location(metadata))
            for index, (_, _, content_hash, _, text, tokens, vector, metadata) in sorted(rows.items())
            if content_hash == doc.content_hash
        ]
        self.documents[collection, doc.doc_id] = DocumentRecord(
            doc.doc_id, doc.title, doc.source, doc.content_hash, chunks, metadata
        )
        self.groups[collection, doc.doc_id] = groups
        self.transactions += 1
        return len(chunks)

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION
    ) -> bool:
        """Set the groups (`tools.access.document_groups`) of document `doc_id` of `collection` in `groups`; False
        when no such document is stored (see `tools.ingest.ports.DocumentGroups`)."""
        if (collection, doc_id) not in self.documents:
            return False
        self.groups[collection, doc_id] = document_groups(groups)
        self.transactions += 1
        return True


def _location(metadata: str) -> dict[str, object]:
    """A staged row's metadata (JSON text) as a dict."""
    value = json.loads(metadata)
    return value if isinstance(value, dict) else {}
