"""Chunk and embed one batch of documents: chunks never cross a page or heading section, carry their location, and
a chunk that cannot be embedded fails only its own document."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from tools.chunking import Chunk, chunk_parts, fit_window
from tools.errors import EmbedderError, EmbedderOverloadedError, StoreError
from tools.extract import Section
from tools.ingest.documents import SourceDocument
from tools.ingest.ports import ChunkSink, DocumentEmbedder
from tools.ingest.reuse import lend_vectors
from tools.records import ChunkRecord, DocumentRecord, IngestCounts
from tools.scope import DEFAULT_COLLECTION

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BadChunk:
    """A chunk that could not be embedded; its document was not stored."""

    doc_id: str
    chunk_index: int
    reason: str


@dataclass
class Prepared:
    """One batch ready to store in `collection`: `records` to write, `documents` in the batch, `unchanged` (stored
    there with the same content when prepared, so not embedded; checked again under the write lock), `failed` chunks
    (their documents are not in `records`)."""

    records: list[DocumentRecord]
    documents: int
    unchanged: list[SourceDocument]
    failed: list[BadChunk]
    collection: str = DEFAULT_COLLECTION
    reused: int = 0
    """Chunks that took a stored vector (`tools.ingest.reuse`) instead of being embedded."""
    embedded: int = 0
    """Chunks sent to the embedder."""

    @property
    def skipped(self) -> int:
        """Documents not embedded because they were stored unchanged."""
        return len(self.unchanged)


def located_chunks(
    doc: SourceDocument, tokenizer: Tokenizer, window: int, overlap: int
) -> list[tuple[Chunk, dict[str, object]]]:
    """The chunks of `doc.content` (never crossing a section) with their location metadata: their section's
    (`page` or `section`) and their span and line boxes (`SourceDocument.span_fields`)."""
    sections = doc.content_sections()
    parts = chunk_parts(doc.content, [s.start for s in sections], tokenizer, window, overlap)
    return [(chunk, chunk_location(doc, sections, part, chunk)) for part, chunk in parts]


def chunk_location(doc: SourceDocument, sections: tuple[Section, ...], part: int, chunk: Chunk) -> dict[str, object]:
    """A chunk's metadata: the location of its section (`sections[part]`; none for part -1, the text before the
    first section), its span and its line boxes."""
    location = sections[part].location() if part >= 0 else {}
    return {**location, **doc.span_fields(chunk.start, chunk.end)}


def _server_failure(exc: EmbedderError) -> bool:
    """Triton failed or refused (unreachable, overloaded, timed out), rather than these texts."""
    return isinstance(exc, EmbedderOverloadedError) or isinstance(exc.__cause__, InferenceServerException)


async def embed_isolating(embedder: DocumentEmbedder, texts: list[str]) -> npt.NDArray[np.float32]:
    """`(len(texts), dim)` float32; a row whose text cannot be embedded is NaN.

    One call for all texts; when it fails for a reason other than the server (e.g. a non-finite output), each
    text is embedded alone so that only the failing ones are lost. Server failures (Triton unreachable,
    overloaded, timed out), and a batch of which no text embeds alone, raise `EmbedderError`.
    """
    try:
        return await embedder.embed(texts, kind="document")
    except EmbedderError as exc:
        if _server_failure(exc):
            raise
        batch_error = exc
        log.warning("embedding a batch of %d chunks failed (%s); embedding its chunks one by one", len(texts), exc)
    out = np.full((len(texts), embedder.spec.dim), np.nan, dtype=np.float32)
    failures = 0
    for i, text in enumerate(texts):
        try:
            out[i] = (await embedder.embed([text], kind="document"))[0]
        except EmbedderError as exc:
            if _server_failure(exc):
                raise
            failures += 1
    if failures == len(texts) > 1:  # not one chunk embeds: the client or server is broken, not the chunks
        raise batch_error
    return out


async def prepare(
    documents: list[SourceDocument],
    embedder: DocumentEmbedder,
    store: ChunkSink,
    chunk_tokens: int,
    overlap_tokens: int,
    collection: str = DEFAULT_COLLECTION,
    *,
    lend_from: Mapping[str, str] | None = None,
) -> Prepared:
    """Chunk and embed the documents of one batch not already stored in `collection` with the same content; a chunk
    whose text the stored version of its document holds reuses that vector (`tools.ingest.reuse`).

    Args:
        lend_from: doc id -> the stored doc id whose chunks lend vectors to it (a renamed file's old id; default:
            the document's own stored version).
    """
    stored = await store.stored_versions([d.doc_id for d in documents], collection)
    todo = [d for d in documents if stored.get(d.doc_id) != d.content_hash]
    window, overlap = fit_window(chunk_tokens, overlap_tokens, embedder.spec.max_tokens)
    tokenizer = embedder.tokenizer
    pieces = await asyncio.to_thread(lambda: [located_chunks(d, tokenizer, window, overlap) for d in todo])
    # --- vector reuse (tools.ingest.reuse): a changed document's chunks whose text its stored version (or the
    # document named by `lend_from`) holds keep their stored vector; only the other chunks are embedded.
    lenders = [(lend_from or {}).get(d.doc_id) or (d.doc_id if d.doc_id in stored else None) for d in todo]
    requests = [(lender, [c.text for c, _ in chunks]) for lender, chunks in zip(lenders, pieces, strict=True)]
    vectors, found = await lend_vectors(store, requests, collection, embedder.spec.dim)
    texts = [c.text for chunks in pieces for c, _ in chunks]
    missing = np.flatnonzero(~found)
    if missing.size:
        vectors[missing] = await embed_isolating(embedder, [texts[i] for i in missing])
    reused = len(texts) - int(missing.size)
    # --- end of vector reuse
    finite: npt.NDArray[np.bool_] = np.asarray(np.isfinite(vectors).all(axis=1))
    records: list[DocumentRecord] = []
    failed: list[BadChunk] = []
    row = 0
    for doc, chunks in zip(todo, pieces, strict=True):
        rows = range(row, row + len(chunks))
        row += len(chunks)
        bad = [c.index for (c, _), r in zip(chunks, rows, strict=True) if not finite[r]]
        if bad:
            for index in bad:
                failed.append(BadChunk(doc.doc_id, index, "non-finite or failed embedding"))
                log.warning("document %r chunk %d: no finite embedding; document not stored", doc.doc_id, index)
            continue
        chunk_records = [
            ChunkRecord(c.index, c.text, c.token_count, vectors[r], location)
            for (c, location), r in zip(chunks, rows, strict=True)
        ]
        records.append(
            DocumentRecord(doc.doc_id, doc.title, doc.source, doc.content_hash, chunk_records, doc.stored_metadata())
        )
    unchanged = [d for d in documents if stored.get(d.doc_id) == d.content_hash]
    return Prepared(records, len(documents), unchanged, failed, collection, reused, len(vectors) - reused)


async def store_prepared(
    prepared: Prepared, embedder: DocumentEmbedder, store: ChunkSink, chunk_tokens: int, overlap_tokens: int
) -> IngestCounts:
    """Store a prepared batch in one transaction. The documents skipped before embedding are skipped only if the
    write transaction still finds them stored unchanged (under the write lock); one deleted or replaced meanwhile
    is embedded and stored by the next transaction.

    Raises:
        StoreError: the same documents went missing three times in a row (deleted again each time).
    """
    sources = {d.doc_id: d for d in prepared.unchanged}
    hashes = {d.doc_id: d.content_hash for d in prepared.unchanged}
    collection = prepared.collection
    counts = await store.add_documents(prepared.records, hashes, collection=collection)
    for _ in range(3):
        if not counts.missing:
            return counts
        missing = [sources[i] for i in counts.missing]
        again = await prepare(missing, embedder, store, chunk_tokens, overlap_tokens, collection)
        more = await store.add_documents(
            again.records, {d.doc_id: d.content_hash for d in again.unchanged}, collection=collection
        )
        counts = IngestCounts(
            counts.added + more.added, counts.skipped + more.skipped, counts.chunks + more.chunks, more.missing
        )
    raise StoreError(f"documents {list(counts.missing)} were deleted or replaced while being stored; try again")
