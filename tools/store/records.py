"""What goes into and comes out of the store: documents and chunks to write, hits, counts and listings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

import asyncpg
import numpy as np
import numpy.typing as npt
from asyncpg.pool import PoolConnectionProxy

from tools.scope import DEFAULT_COLLECTION, qualified_doc_id

Conn = asyncpg.Connection | PoolConnectionProxy
"""A connection, pooled or not."""

FullTextMatch = Literal["all", "any"]
"""Full-text query form: every term (`all`) or any term (`any`)."""
FullTextRank = Literal["bm25", "bm25_exhaustive", "ts_rank_cd"]
"""Full-text ranking: Okapi BM25 by pruned impact-ordered postings (`bm25`), the same BM25 over every posting of
the query terms (`bm25_exhaustive`, cost grows with the corpus), or Postgres' `ts_rank_cd`."""


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk to store: its text, embedding `(dim,)` float32 and token count; `metadata` says where it lies in
    its document (`{"page": 12}` or `{"section": ["Guide", "Install"]}`, empty when unknown)."""

    chunk_index: int
    text: str
    token_count: int
    embedding: npt.NDArray[np.float32]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DocumentRecord:
    """One document to store with its chunks; (collection, doc_id, `content_hash` sha256 hex) keys idempotent
    ingestion (the collection is given to `VectorStore.add_documents`)."""

    doc_id: str
    title: str
    source: str
    content_hash: str
    chunks: list[ChunkRecord]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkHit:
    """A retrieved chunk. `score` is cosine similarity for dense search, BM25 or `ts_rank_cd` for full text;
    `metadata` is the chunk's own (its page or section path, see `ChunkRecord`)."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    source: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict, kw_only=True)


@dataclass(frozen=True)
class IngestCounts:
    """What one `add_documents` call did: documents added, skipped (hash already stored), chunks written, and
    `missing`: doc ids the caller expected to be stored unchanged (and sent without chunks) that were not stored
    with that hash when the write transaction looked, under the write lock (deleted or replaced concurrently);
    the caller embeds and stores them again."""

    added: int = 0
    skipped: int = 0
    chunks: int = 0
    missing: tuple[str, ...] = ()


class StoredChunk(NamedTuple):
    """One stored chunk as a page render reads it: its collection, its metadata (span, page, line boxes) and its
    text (which a sentence's offsets, `passage_span`, index)."""

    collection: str
    metadata: dict[str, object]
    text: str


@dataclass(frozen=True)
class StoredDocument:
    """One stored document: ids, title, source, number of chunks, content hash (sha256 hex) and when it was
    ingested (UTC, `timestamptz`; a replaced document gets the time of its replacement), and its collection
    (`tools.scope`); (collection, doc_id) is its identity."""

    doc_id: str
    title: str
    source: str
    chunks: int
    content_hash: str
    ingested_at: datetime
    collection: str = DEFAULT_COLLECTION


@dataclass(frozen=True)
class DocumentPage:
    """One page of the stored documents in doc_id order.

    Attributes:
        documents: at most the page size asked for.
        total: documents stored when the page was read (the same transaction).
        next_cursor: opaque keyset cursor of the next page (`VectorStore.document_page(cursor=...)`); None on the
            last page.
    """

    documents: list[StoredDocument]
    total: int
    next_cursor: str | None


@dataclass(frozen=True)
class TermVectors:
    """Stored BM25 term statistics of some chunks (`tools.bm25`'s tables), e.g. for pseudo-relevance feedback.

    Attributes:
        chunks: N, chunks in the corpus statistics.
        tf: chunk id -> {`english` lexeme: occurrences in the chunk} (chunks not stored are absent).
        df: lexeme -> chunks containing it, for every lexeme in `tf`.
    """

    chunks: int
    tf: dict[str, dict[str, int]]
    df: dict[str, int]


def hit(row: asyncpg.Record) -> ChunkHit:
    """The ChunkHit of a search row (columns `chunk_id, doc_id, title, text, source, metadata, score`)."""
    return ChunkHit(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        title=row["title"],
        text=row["text"],
        source=row["source"],
        score=float(row["score"]),
        metadata=json.loads(row["metadata"]),
    )


def chunk_id(collection: str, doc_id: str, chunk_index: int) -> str:
    """The stored id of chunk `chunk_index` of document `doc_id` in `collection` (`qualified_doc_id` + `#index`)."""
    return f"{qualified_doc_id(collection, doc_id)}#{chunk_index}"
