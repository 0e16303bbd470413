"""Large documents in sub-batches: their chunks are embedded a sub-batch at a time and staged in Postgres, then moved
into the store in one transaction, so memory stays bounded whatever the document's size and an interrupted run
resumes where it stopped.

A document is large when its content exceeds `LARGE_DOC_CHARS` characters. Its chunks stream from the chunker
(`tools.chunking.iter_chunk_parts`), `sub_batch` at a time: each sub-batch is embedded and written to the staging
table `ingest_staged_chunks` (keyed by collection, doc id and chunk index, tagged with the content hash) in its own
transaction.
When the last one is staged, one transaction (under the store's writer lock) replaces any stored version of the
document and moves the staged chunks into `chunks` with SQL (`INSERT ... SELECT`), counting them into the BM25
statistics; the staged rows go with it. The document is searchable only from then on: nothing half-written is
visible. A re-run finds the staged chunks of the same content hash and embeds only the rest (chunking is
deterministic); staged chunks of another hash (the file changed) are dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tools import bm25
from tools.chunking import fit_window, iter_chunk_parts
from tools.embedder import TritonEmbedder
from tools.ingest.documents import SourceDocument
from tools.ingest.embedding import BadChunk, embed_isolating
from tools.scope import DEFAULT_COLLECTION, qualified_doc_id
from tools.store import VectorStore
from tools.store.writes import delete_rows, lock_writes

LARGE_DOC_CHARS = 65_536
"""Content length above which a document is ingested in staged sub-batches (one chunker piece)."""
SUB_BATCH_CHUNKS = 256
"""Chunks embedded and staged per transaction for a large document."""

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS ingest_staged_chunks (
    collection text NOT NULL DEFAULT 'default',
    doc_id text NOT NULL,
    content_hash text NOT NULL,
    chunk_index integer NOT NULL,
    text text NOT NULL,
    token_count integer NOT NULL,
    embedding vector NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    CONSTRAINT ingest_staged_chunks_key PRIMARY KEY (collection, doc_id, chunk_index)
)
"""

MIGRATE_SQL = """
ALTER TABLE ingest_staged_chunks ADD COLUMN IF NOT EXISTS collection text NOT NULL DEFAULT 'default';
ALTER TABLE ingest_staged_chunks DROP CONSTRAINT IF EXISTS ingest_staged_chunks_pkey;
ALTER TABLE ingest_staged_chunks ADD CONSTRAINT ingest_staged_chunks_key PRIMARY KEY (collection, doc_id, chunk_index);
"""
"""A staging table of a version before collections (primary key (doc_id, chunk_index)) gets the collection."""

StagedFn = Callable[[int], None]
"""Called with the number of chunks of the document staged so far, after each sub-batch."""


@dataclass(frozen=True)
class StagedResult:
    """One large document: `chunks` stored (0 when it failed or was already stored), `resumed` chunks found staged by
    an earlier run (not embedded again), `failed` chunks (the document is then not stored; its staged chunks stay
    for the next run)."""

    chunks: int
    resumed: int
    failed: list[BadChunk]


async def _resume_point(store: VectorStore, doc: SourceDocument, collection: str) -> int:
    """Staged chunks of `doc`'s content in `collection` ready to reuse (0..n-1); other versions' staged chunks are
    dropped."""
    async with store.write_pool.acquire() as conn, conn.transaction():
        await conn.execute(SCHEMA_SQL)
        has_collection = await conn.fetchval(
            "SELECT 1 FROM pg_attribute WHERE attrelid = 'ingest_staged_chunks'::regclass AND attname = 'collection'"
        )
        if not has_collection:
            await conn.execute(MIGRATE_SQL)
        where = "collection = $1 AND doc_id = $2"
        await conn.execute(
            f"DELETE FROM ingest_staged_chunks WHERE {where} AND content_hash <> $3",
            collection,
            doc.doc_id,
            doc.content_hash,
        )
        row = await conn.fetchrow(
            "SELECT count(*) AS n, coalesce(max(chunk_index) + 1, 0) AS top FROM ingest_staged_chunks "
            f"WHERE {where}",
            collection,
            doc.doc_id,
        )
        assert row is not None
        if row["n"] != row["top"]:  # a gap cannot come from this module; start the document over
            await conn.execute(f"DELETE FROM ingest_staged_chunks WHERE {where}", collection, doc.doc_id)
            return 0
        return int(row["n"])


async def _commit(store: VectorStore, doc: SourceDocument, collection: str) -> int:
    """Move the staged chunks of `doc` into `collection` of the store (replacing a stored version there); the
    number of chunks."""
    async with store.write_pool.acquire() as conn, conn.transaction():
        await lock_writes(conn)
        replaced = await conn.fetch(
            "SELECT id FROM documents WHERE collection = $1 AND doc_id = $2 FOR UPDATE", collection, doc.doc_id
        )
        await delete_rows(conn, [r["id"] for r in replaced])
        document_id = await conn.fetchval(
            "INSERT INTO documents (doc_id, title, source, metadata, content_hash, collection) "
            "VALUES ($1, $2, $3, $4::jsonb, $5, $6) RETURNING id",
            doc.doc_id,
            doc.title,
            doc.source,
            json.dumps(doc.metadata),
            doc.content_hash,
            collection,
        )
        status = await conn.execute(
            """
            INSERT INTO chunks (document_id, chunk_id, chunk_index, text, token_count, embedding, metadata)
            SELECT $1, $5 || chunk_index, chunk_index, text, token_count, embedding, metadata
            FROM ingest_staged_chunks WHERE collection = $4 AND doc_id = $2 AND content_hash = $3
            ORDER BY chunk_index
            """,
            document_id,
            doc.doc_id,
            doc.content_hash,
            collection,
            f"{qualified_doc_id(collection, doc.doc_id)}#",
        )
        await bm25.add_chunks(conn, [document_id], store.bm25_k1, store.bm25_b)
        await conn.execute(
            "DELETE FROM ingest_staged_chunks WHERE collection = $1 AND doc_id = $2", collection, doc.doc_id
        )
    return int(status.split()[-1])


async def ingest_large(
    doc: SourceDocument,
    embedder: TritonEmbedder,
    store: VectorStore,
    chunk_tokens: int,
    overlap_tokens: int,
    sub_batch: int = SUB_BATCH_CHUNKS,
    on_staged: StagedFn | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> StagedResult:
    """Chunk, embed and stage `doc` `sub_batch` chunks at a time, then store it in `collection` in one transaction
    (see the module docstring). Call only for a document not stored there with this content hash.

    Raises:
        EmbedderError / asyncpg errors: Triton or Postgres failed; the sub-batches staged before stay for a re-run.
    """
    window, overlap = fit_window(chunk_tokens, overlap_tokens, embedder.spec.max_tokens)
    sections = doc.content_sections()
    resumed = await _resume_point(store, doc, collection)
    staged = resumed
    failed: list[BadChunk] = []
    batch: list[tuple[int, str, int, dict[str, object]]] = []

    async def flush() -> None:
        nonlocal staged
        vectors = await embed_isolating(embedder, [text for _, text, _, _ in batch])
        finite: list[bool] = np.asarray(np.isfinite(vectors).all(axis=1)).tolist()
        rows = []
        for (index, text, tokens, location), vector, ok in zip(batch, vectors, finite, strict=True):
            if not ok:
                failed.append(BadChunk(doc.doc_id, index, "non-finite or failed embedding"))
                continue
            rows.append(
                (collection, doc.doc_id, doc.content_hash, index, text, tokens, vector, json.dumps(location))
            )
        if failed:
            return
        async with store.write_pool.acquire() as conn:
            await conn.copy_records_to_table(
                "ingest_staged_chunks",
                records=rows,
                columns=[
                    "collection",
                    "doc_id",
                    "content_hash",
                    "chunk_index",
                    "text",
                    "token_count",
                    "embedding",
                    "metadata",
                ],
            )
        staged += len(rows)
        batch.clear()
        if on_staged is not None:
            on_staged(staged)

    chunks = iter_chunk_parts(doc.content, [s.start for s in sections], embedder.tokenizer, window, overlap)
    while True:  # chunked in a worker thread, a sub-batch at a time: the event loop never tokenises
        taken = await asyncio.to_thread(lambda: list(itertools.islice(chunks, sub_batch)))
        for part, chunk in taken:
            if chunk.index >= resumed:
                location = sections[part].location() if part >= 0 else {}
                batch.append((chunk.index, chunk.text, chunk.token_count, location))
        if batch and (len(batch) >= sub_batch or not taken):
            await flush()
            if failed:
                return StagedResult(0, resumed, failed)
        if not taken:
            break
    return StagedResult(await _commit(store, doc, collection), resumed, [])
