"""Large documents in sub-batches: their chunks are embedded a sub-batch at a time and staged in Postgres, then moved
into the store in one transaction, so memory stays bounded whatever the document's size and an interrupted run
resumes where it stopped.

A document is large when its content exceeds `LARGE_DOC_CHARS` characters. Its chunks stream from the chunker
(`tools.chunking.iter_chunk_parts`), `sub_batch` at a time: each sub-batch is embedded and written to the staging
table `ingest_staged_chunks` (keyed by collection, doc id and chunk index, tagged with the content hash; its statements
are the sink's, `tools.ingest.ports.ChunkSink`; in Postgres `tools.store.staging`) in its own transaction.
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

from tools.chunking import fit_window, iter_chunk_parts
from tools.ingest.documents import SourceDocument
from tools.ingest.embedding import BadChunk, chunk_location, embed_isolating
from tools.ingest.ports import ChunkSink, DocumentEmbedder
from tools.records import StagedDocument, StagedRow
from tools.scope import DEFAULT_COLLECTION

LARGE_DOC_CHARS = 65_536
"""Content length above which a document is ingested in staged sub-batches (one chunker piece)."""
SUB_BATCH_CHUNKS = 256
"""Chunks embedded and staged per transaction for a large document."""

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


async def ingest_large(
    doc: SourceDocument,
    embedder: DocumentEmbedder,
    store: ChunkSink,
    chunk_tokens: int,
    overlap_tokens: int,
    sub_batch: int = SUB_BATCH_CHUNKS,
    on_staged: StagedFn | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> StagedResult:
    """Chunk, embed and stage `doc` `sub_batch` chunks at a time, then store it in `collection` in one transaction
    (see the module docstring). Call only for a document not stored there with this content hash.

    Raises:
        EmbedderError / StoreError: Triton or Postgres failed (`StoreUnavailableError` while Postgres is down or
            restarting); the sub-batches staged before stay for a re-run.
    """
    window, overlap = fit_window(chunk_tokens, overlap_tokens, embedder.spec.max_tokens)
    sections = doc.content_sections()
    staged_doc = StagedDocument(doc.doc_id, doc.content_hash, doc.title, doc.source, doc.stored_metadata())
    resumed = await store.resume_point(staged_doc, collection)
    staged = resumed
    failed: list[BadChunk] = []
    batch: list[tuple[int, str, int, dict[str, object]]] = []

    async def flush() -> None:
        nonlocal staged
        vectors = await embed_isolating(embedder, [text for _, text, _, _ in batch])
        finite: list[bool] = np.asarray(np.isfinite(vectors).all(axis=1)).tolist()
        rows: list[StagedRow] = []
        for (index, text, tokens, location), vector, ok in zip(batch, vectors, finite, strict=True):
            if not ok:
                failed.append(BadChunk(doc.doc_id, index, "non-finite or failed embedding"))
                continue
            rows.append(
                (collection, doc.doc_id, staged_doc.content_hash, index, text, tokens, vector, json.dumps(location))
            )
        if failed:
            return
        await store.stage_chunks(rows)
        staged += len(rows)
        batch.clear()
        if on_staged is not None:
            on_staged(staged)

    chunks = iter_chunk_parts(doc.content, [s.start for s in sections], embedder.tokenizer, window, overlap)
    while True:  # chunked in a worker thread, a sub-batch at a time: the event loop never tokenises
        taken = await asyncio.to_thread(lambda: list(itertools.islice(chunks, sub_batch)))
        for part, chunk in taken:
            if chunk.index >= resumed:
                location = chunk_location(doc, sections, part, chunk)
                batch.append((chunk.index, chunk.text, chunk.token_count, location))
        if batch and (len(batch) >= sub_batch or not taken):
            await flush()
            if failed:
                return StagedResult(0, resumed, failed)
        if not taken:
            break
    return StagedResult(await store.commit_staged(staged_doc, collection), resumed, [])
