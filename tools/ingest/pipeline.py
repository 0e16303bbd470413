"""The ingest pipeline: scan, then stream documents read -> chunk -> embed -> store in batches keyed by content
hash.

Every input is first scanned (JSONL line by line: validation, ids; memory bounded by one line and the id set), then
documents stream in batches of `batch_docs`: the next batch is chunked and embedded (an asyncio task, input order
kept) while the current one is stored, so memory holds at most `prefetch + 1` batches. Files are read and extracted
in a worker thread, off the event loop. Every document of a run goes into one collection (`tools.scope`; the default
collection unless given). Each batch is one transaction; a document already stored with the same (collection, doc id,
sha256 of the content) is skipped before embedding, so an interrupted run (Ctrl-C, Triton killed, Postgres restarted)
finishes when re-run, with no chunk lost or duplicated. A document over `LARGE_DOC_CHARS` characters is
embedded and staged in sub-batches of chunks and stored at the end in one transaction (`tools.ingest.staging`): memory
stays bounded whatever its size, progress is reported per sub-batch, and a re-run resumes from its staged chunks.
A chunk whose embedding is not finite fails only its own document (reported by doc id and chunk index); the rest of
the batch is stored. A document file that cannot
be extracted (corrupt, encrypted, no text layer, ...) fails alone: the run records its error and goes on; a file of
an unsupported type is listed as skipped.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from tools.errors import StoreError
from tools.ingest.documents import IngestError, SourceDocument
from tools.ingest.embedding import Prepared, prepare, store_prepared
from tools.ingest.groups import with_groups
from tools.ingest.inputs import InputFile, printable
from tools.ingest.ports import ChunkSink, DocumentEmbedder, IngestOptions
from tools.ingest.readers import jsonl_documents, read_file_document, scan_inputs
from tools.ingest.report import FileError, IngestReport, ProgressFn
from tools.ingest.staging import LARGE_DOC_CHARS, ingest_large
from tools.records import IngestCounts
from tools.scope import DEFAULT_COLLECTION, ScopeError, check_collection

StoredFn = Callable[[str, list[tuple[str, Path]]], None]
"""Called with the collection and the `(doc id, file)` of each document file of a batch once its document is stored
(or found stored unchanged), in a worker thread: `tools.originals.Originals.keep_files` keeps the originals."""


@dataclass
class _Batch:
    documents: list[SourceDocument]
    kinds: dict[str, str]
    """doc id -> sniffed type of the file it came from, for document files (JSONL records are counted per file)."""


def _batches(inputs: list[InputFile], report: IngestReport, options: IngestOptions) -> Iterator[_Batch]:
    """Batches of documents in input order; unsupported and failing files are recorded in `report` and skipped."""
    batch = _Batch([], {})
    for inp in inputs:
        if not inp.supported:
            report.count("unsupported").skipped += 1
            report.file_errors.append(
                FileError(printable(inp.path), inp.kind, f"{printable(inp.path)}: unsupported type, skipped")
            )
            continue
        if inp.doc_id is None:
            report.count("jsonl").stored += 1
            documents: Iterable[SourceDocument] = (doc for _, doc in jsonl_documents(inp))
        else:
            try:
                read = read_file_document(inp, options.max_file_bytes, options.ocr)
            except IngestError as exc:
                report.count(inp.kind).failed += 1
                report.file_errors.append(FileError(printable(inp.path), inp.kind, str(exc)))
                continue
            if inp.paged:
                report.pages += read.pages
                report.extract_s += read.extract_s
                report.ocr_pages += read.ocr_pages
                report.ocr_s += read.ocr_s
            if read.document is None:
                report.count(inp.kind).unchanged += 1
                continue
            batch.kinds[read.document.doc_id] = inp.kind
            documents = [read.document]
        for doc in documents:
            batch.documents.append(with_groups(doc, options.groups))
            if len(batch.documents) == options.batch_docs:
                yield batch
                batch = _Batch([], {})
    if batch.documents:
        yield batch


@dataclass
class _Done:
    """A batch handled: `prepared` (small documents to store in one transaction) and the large documents already
    stored through staging (`tools.ingest.staging`)."""

    prepared: Prepared
    large_added: list[str] = field(default_factory=list)
    large_unchanged: list[str] = field(default_factory=list)
    large_chunks: int = 0
    resumed_chunks: int = 0


async def _prepare_batch(
    documents: list[SourceDocument],
    embedder: DocumentEmbedder,
    store: ChunkSink,
    chunk_tokens: int,
    overlap_tokens: int,
    on_staged: Callable[[int], None] | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> _Done:
    """Small documents chunked and embedded for one transaction; large ones (over `LARGE_DOC_CHARS`) not stored
    in `collection` with the same content are staged and stored one by one, `SUB_BATCH_CHUNKS` chunks at a time."""
    large = [d for d in documents if len(d.content) > LARGE_DOC_CHARS]
    small = [d for d in documents if len(d.content) <= LARGE_DOC_CHARS]
    prepared = await prepare(small, embedder, store, chunk_tokens, overlap_tokens, collection)
    done = _Done(prepared)
    if not large:
        return done
    stored = await store.stored_versions([d.doc_id for d in large], collection)
    for doc in large:
        prepared.documents += 1
        if stored.get(doc.doc_id) == doc.content_hash:
            done.large_unchanged.append(doc.doc_id)
            continue
        result = await ingest_large(
            doc, embedder, store, chunk_tokens, overlap_tokens, on_staged=on_staged, collection=collection
        )
        prepared.failed += result.failed
        done.resumed_chunks += result.resumed
        if not result.failed:
            done.large_added.append(doc.doc_id)
            done.large_chunks += result.chunks
    return done


async def ingest_documents(
    documents: list[SourceDocument], embedder: DocumentEmbedder, store: ChunkSink, options: IngestOptions
) -> IngestCounts:
    """Chunk, embed and store one batch of documents in `options.collection` in one transaction; documents stored
    there with the same content hash are skipped before embedding (`options.batch_docs` is not applied: the caller
    batches).

    Args:
        documents: the batch (a repeated doc id: the last one wins).
        options: the chunk window (`chunk_tokens`, `overlap_tokens`) and the collection.

    Raises:
        EmbedderError / StoreError: the embedder or the sink failed; nothing of the batch is stored then.
    """
    documents = list({d.doc_id: d for d in documents}.values())
    chunk_tokens, overlap_tokens = options.chunk_tokens, options.overlap_tokens
    done = await _prepare_batch(documents, embedder, store, chunk_tokens, overlap_tokens, collection=options.collection)
    counts = await store_prepared(done.prepared, embedder, store, chunk_tokens, overlap_tokens)
    return IngestCounts(
        added=counts.added + len(done.large_added),
        skipped=counts.skipped + len(done.large_unchanged),
        chunks=counts.chunks + done.large_chunks,
    )


def _stored_files(batch: _Batch, done: _Done) -> list[tuple[str, Path]]:
    """`(doc id, file)` of the document files of `batch` whose document is stored, new or unchanged."""
    prepared = done.prepared
    failed = {b.doc_id for b in prepared.failed}
    stored = {r.doc_id for r in prepared.records} | {d.doc_id for d in prepared.unchanged}
    stored |= set(done.large_added) | set(done.large_unchanged)
    return [
        (d.doc_id, Path(d.source))
        for d in batch.documents
        if d.doc_id in batch.kinds and d.doc_id in stored and d.doc_id not in failed
    ]


def _count_files(report: IngestReport, batch: _Batch, done: _Done) -> None:
    prepared = done.prepared
    failed = {b.doc_id for b in prepared.failed}
    for doc_id in [r.doc_id for r in prepared.records] + done.large_added:
        if doc_id in batch.kinds:
            report.count(batch.kinds[doc_id]).stored += 1
    for doc_id in [d.doc_id for d in prepared.unchanged] + done.large_unchanged:
        if doc_id in batch.kinds:
            report.count(batch.kinds[doc_id]).unchanged += 1
    for doc_id in failed:
        if doc_id in batch.kinds:
            report.count(batch.kinds[doc_id]).failed += 1


async def ingest(
    inputs: list[InputFile],
    embedder: DocumentEmbedder,
    store: ChunkSink,
    options: IngestOptions,
    on_progress: ProgressFn | None = None,
    on_stored: StoredFn | None = None,
) -> IngestReport:
    """Scan, then stream the inputs into the sink: the next `options.prefetch` batches are chunked and embedded
    while the current one is stored (one transaction per batch of `options.batch_docs`, in input order).

    Args:
        inputs: from `plan_inputs`.
        embedder: connected (a `TritonEmbedder`: its `max_in_flight` bounds the requests this run keeps at Triton).
        store: connected.
        options: chunk window, batch size, prefetch, sample size, file size limit, collection and OCR
            (`tools.ingest.ports.IngestOptions`).
        on_progress: see `ProgressFn`.
        on_stored: see `StoredFn` (JSONL records are no files of their own: never passed).

    Returns:
        The run's counts, per-file outcomes and timing.

    Raises:
        IngestError: a malformed JSONL input, a repeated document id or an invalid collection name (nothing is
            stored: every input is scanned first). A document file that cannot be extracted does not raise: it is
            in `IngestReport.file_errors`.
        EmbedderError: Triton failed; StoreError: Postgres failed. Batches stored before the failure stay
            stored; re-running the same ingest completes the rest.
    """
    chunk_tokens, overlap_tokens, collection = options.chunk_tokens, options.overlap_tokens, options.collection
    try:
        check_collection(collection)
    except ScopeError as exc:
        raise IngestError(str(exc)) from None
    start = time.perf_counter()
    total = await asyncio.to_thread(scan_inputs, inputs)
    report = IngestReport()
    rng = random.Random(0)
    seen_chunks = 0
    # Batches being chunked, embedded or stored, in input order: at most `options.prefetch` + 1 at a time.
    slots = asyncio.Semaphore(options.prefetch + 1)
    queue: asyncio.Queue[tuple[_Batch, asyncio.Task[_Done]] | None] = asyncio.Queue()
    pending: set[asyncio.Task[_Done]] = set()

    def on_staged(staged: int) -> None:  # a large document's progress, chunk sub-batch by sub-batch
        if on_progress is not None:
            on_progress(report.documents, total, report.chunks + staged)

    async def produce() -> None:
        batches = _batches(inputs, report, options)
        while True:
            await slots.acquire()
            batch = await asyncio.to_thread(next, batches, None)
            if batch is None:
                break
            task = asyncio.create_task(
                _prepare_batch(batch.documents, embedder, store, chunk_tokens, overlap_tokens, on_staged, collection)
            )
            pending.add(task)
            queue.put_nowait((batch, task))
        queue.put_nowait(None)

    async def consume() -> None:
        nonlocal seen_chunks
        while (item := await queue.get()) is not None:
            batch, task = item
            done = await task
            prepared = done.prepared
            pending.discard(task)
            counts = await store_prepared(prepared, embedder, store, chunk_tokens, overlap_tokens)
            slots.release()
            for record in prepared.records:
                for chunk in record.chunks:
                    seen_chunks += 1
                    if len(report.sample) < options.sample_size:
                        report.sample.append(chunk.text)
                    elif (slot := rng.randrange(seen_chunks)) < options.sample_size:
                        report.sample[slot] = chunk.text
            report.documents += prepared.documents
            report.added += counts.added + len(done.large_added)
            report.skipped += counts.skipped + len(done.large_unchanged)
            report.chunks += counts.chunks + done.large_chunks
            report.resumed_chunks += done.resumed_chunks
            report.reused_chunks += prepared.reused
            report.failed += prepared.failed
            _count_files(report, batch, done)
            if on_stored is not None and (files := _stored_files(batch, done)):
                await asyncio.to_thread(on_stored, collection, files)
            if on_progress is not None:
                on_progress(report.documents, total, report.chunks)

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(produce())
            group.create_task(consume())
    except BaseExceptionGroup as errors:  # the first failure, as itself (EmbedderError, StoreError, ...)
        first = errors.exceptions[0]
        if isinstance(first, OSError | asyncpg.PostgresError | asyncpg.InterfaceError):
            raise StoreError(
                f"Postgres failed during ingestion ({type(first).__name__}: {first}); the batches stored before "
                f"are kept: run the same ingest again to resume"
            ) from first
        raise first from None
    finally:  # a failure or Ctrl-C: batches not stored yet are dropped (a re-run embeds them again)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    report.wall_s = time.perf_counter() - start
    return report
