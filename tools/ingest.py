"""Ingestion: read files, chunk by embedder tokens, embed on Triton, store in batches keyed by content hash.

Inputs: `.jsonl` in BEIR corpus form (`{"_id", "title", "text", "metadata"}` per line), `.txt` and `.md` (one
document per file; title = the first Markdown heading, else the file name).

Document ids are unique and stable: a `.txt`/`.md` file's id is its path relative to the ingest root (POSIX
separators, suffix kept, e.g. `a/handbook.md`), a `.jsonl` record keeps its `_id`; both get an optional prefix.
Two inputs with the same id in one run are refused before anything is stored, naming both.

Text rules: a UTF-8 byte order mark is ignored (a file hashes the same with or without it); NUL characters and
lone surrogates, which Postgres `text` cannot store, are removed with a WARNING naming the file (and line); bytes
that are not UTF-8 are refused naming the file and the byte offset.

Pipeline (`ingest`): every input is first scanned line by line (validation, ids, document count; memory bounded by
one line and the id set), then documents stream read -> chunk -> embed -> store in batches of `batch_docs`: the
next batch is chunked and embedded (an asyncio task, input order kept) while the current one is stored, so memory
holds at most two batches. Each batch is one transaction; a document already stored with the same (doc id, sha256
of the content) is skipped before embedding, so an interrupted run (Ctrl-C, Triton killed, Postgres restarted)
finishes when re-run, with no chunk lost or duplicated. A chunk whose embedding is not finite fails only its own
document (reported by doc id and chunk index); the rest of the batch is stored.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
from tritonclient.utils import InferenceServerException

from tools.chunking import chunk_text, fit_window
from tools.embedder import EmbedderError, EmbedderOverloadedError, TritonEmbedder
from tools.jsonl import JsonlError, read_records
from tools.store import ChunkRecord, DocumentRecord, IngestCounts, StoreError, VectorStore

log = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".jsonl", ".txt", ".md")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL (Postgres `text` and `jsonb` reject it) and lone UTF-16 surrogates (not encodable as UTF-8)."""


class IngestError(ValueError):
    """An input cannot be ingested: missing, unreadable, unsupported, malformed or a repeated document id
    (the message names the file, and the line or byte offset where it applies)."""


@dataclass(frozen=True)
class SourceDocument:
    """A document read from a file, before chunking."""

    doc_id: str
    title: str
    text: str
    source: str
    metadata: dict[str, Any]

    @property
    def content(self) -> str:
        """Title and text as one passage (BEIR's document form)."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text

    @property
    def content_hash(self) -> str:
        """sha256 hex of the content: the key of idempotent ingestion."""
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class InputFile:
    """One input file and how its documents are named.

    Attributes:
        path: the file.
        doc_id: the id of its one document (`.txt`, `.md`); None for `.jsonl`, whose records carry `_id`.
        prefix: prepended to every `_id` of a `.jsonl` file (already part of `doc_id` otherwise).
    """

    path: Path
    doc_id: str | None
    prefix: str = ""


@dataclass(frozen=True)
class BadChunk:
    """A chunk that could not be embedded; its document was not stored."""

    doc_id: str
    chunk_index: int
    reason: str


@dataclass
class IngestReport:
    """What one `ingest` run did.

    Attributes:
        documents: documents read from the inputs.
        added: documents written (new or changed).
        skipped: documents already stored with the same content.
        chunks: chunks embedded and written.
        failed: chunks whose embedding failed; their documents were not stored.
        wall_s: wall time of the run, seconds.
        sample: up to `sample_size` chunk texts embedded in this run, drawn uniformly (reservoir sampling,
            Vitter 1985, algorithm R), for measuring the in-process ceiling on the same text lengths.
    """

    documents: int = 0
    added: int = 0
    skipped: int = 0
    chunks: int = 0
    failed: list[BadChunk] = field(default_factory=list)
    wall_s: float = 0.0
    sample: list[str] = field(default_factory=list)

    @property
    def docs_per_s(self) -> float:
        """Documents handled (added or skipped) per second of wall time."""
        return self.documents / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def chunks_per_s(self) -> float:
        """Chunks embedded and stored per second of wall time."""
        return self.chunks / self.wall_s if self.wall_s > 0 else 0.0


ProgressFn = Callable[[int, int, int], None]
"""Called as `(documents handled, documents in all inputs, chunks written)` after each stored batch."""


def check_paths(paths: list[Path]) -> None:
    """Validate all inputs before anything is read or stored.

    Raises:
        IngestError: a path is missing, not a readable file, or has an unsupported suffix.
    """
    if not paths:
        raise IngestError("no input paths given; expected one or more .jsonl, .txt or .md files")
    for path in paths:
        if not path.is_file():
            raise IngestError(f"{path}: no such file")
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            raise IngestError(f"{path}: unsupported file type {path.suffix!r}; expected one of {SUPPORTED_SUFFIXES}")
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as exc:
            raise IngestError(f"{path}: cannot be read ({exc.strerror})") from exc


def default_root(paths: Iterable[Path]) -> Path:
    """The current directory when every input lies under it, else the inputs' common parent directory."""
    resolved = [p.resolve() for p in paths]
    cwd = Path.cwd().resolve()
    if all(p.is_relative_to(cwd) for p in resolved):
        return cwd
    return Path(os.path.commonpath([str(p.parent) for p in resolved]))


def plan_inputs(paths: list[Path], root: Path | None = None, prefix: str = "") -> list[InputFile]:
    """Check the inputs and name their documents.

    Args:
        paths: input files (.jsonl, .txt, .md).
        root: ids of .txt/.md files are their paths relative to this directory (default `default_root`).
        prefix: prepended to every document id (e.g. `handbook/`).

    Raises:
        IngestError: a bad path (see `check_paths`), a file outside `root`, the same file given twice, or two
            files that would get the same document id (names both).
    """
    check_paths(paths)
    base = (root or default_root(paths)).resolve()
    seen: dict[str, Path] = {}
    files: dict[Path, Path] = {}
    inputs = []
    for path in paths:
        resolved = path.resolve()
        if resolved in files:
            raise IngestError(f"{path}: given twice (also as {files[resolved]}); expected each input once")
        files[resolved] = path
        if path.suffix.lower() == ".jsonl":
            inputs.append(InputFile(path, None, prefix))
            continue
        if not resolved.is_relative_to(base):
            raise IngestError(f"{path}: outside the ingest root {base}; pass --root with a directory holding it")
        doc_id = prefix + resolved.relative_to(base).as_posix()
        if doc_id in seen:
            raise IngestError(f"{seen[doc_id]} and {path} both get document id {doc_id!r}; pass distinct --prefix")
        seen[doc_id] = path
        inputs.append(InputFile(path, doc_id))
    return inputs


def clean_text(text: str, where: str) -> str:
    """`text` without characters Postgres cannot store (NUL, lone surrogates); a WARNING names `where` when any
    are removed."""
    cleaned, removed = _UNSTORABLE.subn("", text)
    if removed:
        log.warning("%s: removed %d NUL or unpaired-surrogate character(s) Postgres cannot store", where, removed)
    return cleaned


def _clean_value(value: Any, where: str) -> Any:
    if isinstance(value, str):
        return clean_text(value, where)
    if isinstance(value, dict):
        return {clean_text(str(k), where): _clean_value(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_value(v, where) for v in value]
    return value


def _decode(path: Path, data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        data, skipped = data[len(codecs.BOM_UTF8) :], len(codecs.BOM_UTF8)
    else:
        skipped = 0
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(
            f"{path}: not valid UTF-8 at byte {skipped + exc.start} ({exc.reason}); expected UTF-8 text"
        ) from None


def read_documents(source: InputFile | Path) -> Iterator[SourceDocument]:
    """Documents of one input, streamed (a `.jsonl` file one line at a time).

    A bare `Path` is named as in `plan_inputs([path])`.

    Raises:
        IngestError: invalid UTF-8, invalid JSON, or a JSONL record without `_id` / `text` (names the line).
    """
    inp = source if isinstance(source, InputFile) else plan_inputs([source])[0]
    for _, doc in _located_documents(inp):
        yield doc


def _located_documents(inp: InputFile) -> Iterator[tuple[str, SourceDocument]]:
    """(`path:line` or `path`, document) for each document of `inp`; see `read_documents`."""
    path = inp.path
    try:
        if inp.doc_id is None:
            for lineno, record in read_records(path):
                where = f"{path}:{lineno}"
                if "text" not in record:
                    raise IngestError(f"{where}: expected a BEIR corpus record {{'_id', 'title', 'text'}}")
                doc_id = clean_text(str(record["_id"]), where)
                if not doc_id.strip():
                    raise IngestError(f"{where}: empty '_id'; expected a non-blank document id")
                text = clean_text(str(record["text"]), where)
                title = clean_text(str(record.get("title") or ""), where)
                metadata = record.get("metadata") or {}
                if not isinstance(metadata, dict):
                    raise IngestError(f"{where}: 'metadata' is a {type(metadata).__name__}; expected an object")
                if text.strip() or title.strip():
                    doc = SourceDocument(inp.prefix + doc_id, title, text, str(path), _clean_value(metadata, where))
                    yield where, doc
        else:
            text = clean_text(_decode(path, path.read_bytes()), str(path))
            title = path.stem
            first = text.lstrip().splitlines()[0] if text.strip() else ""
            if path.suffix.lower() == ".md" and first.startswith("#"):
                title = first.lstrip("#").strip()
            if text.strip():
                yield str(path), SourceDocument(inp.doc_id, title, text, str(path), {})
    except JsonlError as exc:
        raise IngestError(f"{exc} (expected a BEIR corpus record {{'_id', 'title', 'text'}})") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot be read ({exc.strerror})") from exc


def scan_inputs(inputs: list[InputFile]) -> int:
    """Read every input once without storing anything: the number of documents they hold.

    Raises:
        IngestError: any malformed input (see `read_documents`), or one document id twice in the run (names
            both places).
    """
    first_seen: dict[str, str] = {}
    for inp in inputs:
        for where, doc in _located_documents(inp):
            other = first_seen.setdefault(doc.doc_id, where)
            if other != where:
                raise IngestError(
                    f"document id {doc.doc_id!r} appears at {other} and at {where}; expected unique ids in one run"
                )
    return len(first_seen)


def _batches(inputs: list[InputFile], size: int) -> Iterator[list[SourceDocument]]:
    batch: list[SourceDocument] = []
    for inp in inputs:
        for doc in read_documents(inp):
            batch.append(doc)
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


@dataclass
class _Prepared:
    records: list[DocumentRecord]
    documents: int
    unchanged: list[SourceDocument]  # stored with the same content when prepared; checked again under the lock
    failed: list[BadChunk]


def _server_failure(exc: EmbedderError) -> bool:
    """Triton failed or refused (unreachable, overloaded, timed out), rather than these texts."""
    return isinstance(exc, EmbedderOverloadedError) or isinstance(exc.__cause__, InferenceServerException)


async def _embed_isolating(embedder: TritonEmbedder, texts: list[str]) -> npt.NDArray[np.float32]:
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


async def _prepare(
    documents: list[SourceDocument],
    embedder: TritonEmbedder,
    store: VectorStore,
    chunk_tokens: int,
    overlap_tokens: int,
) -> _Prepared:
    """Chunk and embed the documents of one batch not already stored with the same content."""
    stored = await store.stored_versions([d.doc_id for d in documents])
    todo = [d for d in documents if stored.get(d.doc_id) != d.content_hash]
    window, overlap = fit_window(chunk_tokens, overlap_tokens, embedder.spec.max_tokens)
    pieces = await asyncio.to_thread(lambda: [chunk_text(d.content, embedder.tokenizer, window, overlap) for d in todo])
    texts = [c.text for chunks in pieces for c in chunks]
    vectors = await _embed_isolating(embedder, texts) if texts else np.zeros((0, embedder.spec.dim), np.float32)
    finite: npt.NDArray[np.bool_] = np.asarray(np.isfinite(vectors).all(axis=1))
    records: list[DocumentRecord] = []
    failed: list[BadChunk] = []
    row = 0
    for doc, chunks in zip(todo, pieces, strict=True):
        rows = range(row, row + len(chunks))
        row += len(chunks)
        bad = [c.index for c, r in zip(chunks, rows, strict=True) if not finite[r]]
        if bad:
            for index in bad:
                failed.append(BadChunk(doc.doc_id, index, "non-finite or failed embedding"))
                log.warning("document %r chunk %d: no finite embedding; document not stored", doc.doc_id, index)
            continue
        chunk_records = [
            ChunkRecord(c.index, c.text, c.token_count, vectors[r]) for c, r in zip(chunks, rows, strict=True)
        ]
        records.append(DocumentRecord(doc.doc_id, doc.title, doc.source, doc.content_hash, chunk_records, doc.metadata))
    unchanged = [d for d in documents if stored.get(d.doc_id) == d.content_hash]
    return _Prepared(records, len(documents), unchanged, failed)


async def _store(
    prepared: _Prepared, embedder: TritonEmbedder, store: VectorStore, chunk_tokens: int, overlap_tokens: int
) -> IngestCounts:
    """Store a prepared batch in one transaction. The documents skipped before embedding are skipped only if the
    write transaction still finds them stored unchanged (under the write lock); one deleted or replaced meanwhile
    is embedded and stored by the next transaction.

    Raises:
        StoreError: the same documents went missing three times in a row (deleted again each time).
    """
    sources = {d.doc_id: d for d in prepared.unchanged}
    hashes = {d.doc_id: d.content_hash for d in prepared.unchanged}
    counts = await store.add_documents(prepared.records, hashes)
    for _ in range(3):
        if not counts.missing:
            return counts
        again = await _prepare([sources[i] for i in counts.missing], embedder, store, chunk_tokens, overlap_tokens)
        more = await store.add_documents(again.records, {d.doc_id: d.content_hash for d in again.unchanged})
        counts = IngestCounts(
            counts.added + more.added, counts.skipped + more.skipped, counts.chunks + more.chunks, more.missing
        )
    raise StoreError(f"documents {list(counts.missing)} were deleted or replaced while being stored; try again")


async def ingest_documents(
    documents: list[SourceDocument],
    embedder: TritonEmbedder,
    store: VectorStore,
    chunk_tokens: int,
    overlap_tokens: int,
) -> IngestCounts:
    """Chunk, embed and store one batch of documents in one transaction; documents stored with the same
    content hash are skipped before embedding.

    Args:
        documents: the batch (a repeated doc id: the last one wins).
        chunk_tokens, overlap_tokens: chunk window in embedder tokens; a window above the model limit minus 2 is
            clamped to it and the overlap shrinks in proportion (`tools.chunking.fit_window`).
    """
    documents = list({d.doc_id: d for d in documents}.values())
    prepared = await _prepare(documents, embedder, store, chunk_tokens, overlap_tokens)
    return await _store(prepared, embedder, store, chunk_tokens, overlap_tokens)


async def ingest(
    inputs: list[InputFile],
    embedder: TritonEmbedder,
    store: VectorStore,
    *,
    chunk_tokens: int,
    overlap_tokens: int,
    batch_docs: int = 64,
    on_progress: ProgressFn | None = None,
    sample_size: int = 256,
    prefetch: int = 1,
) -> IngestReport:
    """Scan, then stream the inputs into the store: the next `prefetch` batches are chunked and embedded while
    the current one is stored (one transaction per batch, in input order).

    Args:
        inputs: from `plan_inputs`.
        embedder: connected; its `max_in_flight` bounds the requests this run keeps at Triton.
        store: connected.
        chunk_tokens, overlap_tokens: chunk window in embedder tokens.
        batch_docs: documents per embed call and per store transaction.
        on_progress: see `ProgressFn`.
        sample_size: how many embedded chunk texts to keep in `IngestReport.sample`.
        prefetch: batches chunked and embedded ahead of the one being stored (>= 1); memory holds at most
            prefetch + 1 batches.

    Returns:
        The run's counts and timing.

    Raises:
        IngestError: a malformed input (nothing is stored: every input is scanned first).
        EmbedderError: Triton failed; StoreError: Postgres failed. Batches stored before the failure stay
            stored; re-running the same ingest completes the rest.
    """
    if batch_docs < 1 or prefetch < 1:
        raise ValueError(f"batch_docs={batch_docs}, prefetch={prefetch}; expected both >= 1")
    start = time.perf_counter()
    total = await asyncio.to_thread(scan_inputs, inputs)
    report = IngestReport()
    rng = random.Random(0)
    seen_chunks = 0
    # Batches being chunked, embedded or stored, in input order: at most `prefetch` + 1 at a time.
    slots = asyncio.Semaphore(prefetch + 1)
    queue: asyncio.Queue[asyncio.Task[_Prepared] | None] = asyncio.Queue()
    pending: set[asyncio.Task[_Prepared]] = set()

    async def produce() -> None:
        batches = _batches(inputs, batch_docs)
        while True:
            await slots.acquire()
            batch = await asyncio.to_thread(next, batches, None)
            if batch is None:
                break
            task = asyncio.create_task(_prepare(batch, embedder, store, chunk_tokens, overlap_tokens))
            pending.add(task)
            queue.put_nowait(task)
        queue.put_nowait(None)

    async def consume() -> None:
        nonlocal seen_chunks
        while (task := await queue.get()) is not None:
            prepared = await task
            pending.discard(task)
            counts = await _store(prepared, embedder, store, chunk_tokens, overlap_tokens)
            slots.release()
            for record in prepared.records:
                for chunk in record.chunks:
                    seen_chunks += 1
                    if len(report.sample) < sample_size:
                        report.sample.append(chunk.text)
                    elif (slot := rng.randrange(seen_chunks)) < sample_size:
                        report.sample[slot] = chunk.text
            report.documents += prepared.documents
            report.added += counts.added
            report.skipped += counts.skipped
            report.chunks += counts.chunks
            report.failed += prepared.failed
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
