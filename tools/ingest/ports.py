"""What ingestion needs of the outside world: an embedder for documents, a chunk sink, a folder sync's ledger and
the kept originals, and one options object.

The pipeline (`tools.ingest.pipeline`) depends on the first two protocols only, a folder sync (`tools.ingest.sync`)
on all four. `tools.embedder.TritonEmbedder`, `tools.store.VectorStore`,
`tools.store.sync_state.PostgresSyncLedger` and `tools.originals.Originals` implement them over Triton, Postgres and
the file system; the in-memory doubles (`tools.in_memory_sink.InMemorySink`, `tools.in_memory_sync.InMemorySyncLedger`,
`tools.in_memory_originals.InMemoryOriginals`, with any embedder) keep the pipeline's and the sync's own logic
testable without a server, and one contract suite per port (`tests/contracts/test_chunk_sink.py`,
`test_sync_ledger.py`, `test_originals.py`) holds the double to the real behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from tools.chunking import check_window
from tools.errors import StoreError
from tools.extract import MAX_FILE_BYTES
from tools.extract.ocr import OcrOptions
from tools.ingest.inputs import TEMPORARY_NAMES
from tools.model_specs import EmbeddingModelSpec
from tools.records import (
    DocumentRecord,
    FileState,
    Hashes,
    IngestCounts,
    StagedDocument,
    StagedRow,
    StoredFile,
    SyncSource,
    TextKind,
)
from tools.scope import DEFAULT_COLLECTION


class DocumentEmbedder(Protocol):
    """What ingestion needs of an embedder (`tools.embedder.TritonEmbedder`): its model's facts, its tokenizer (the
    chunker counts tokens with it), and document embeddings."""

    @property
    def spec(self) -> EmbeddingModelSpec:
        """The model's facts (`dim`, `max_tokens`)."""
        ...

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's Hugging Face tokenizer (no padding or truncation configured)."""
        ...

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        """`(len(texts), spec.dim)` float32 L2-normalised embeddings.

        Raises:
            tools.errors.EmbedderError: the server failed or refused, or a text could not be embedded.
        """
        ...


class ChunkSink(Protocol):
    """Where ingestion writes (`tools.store.VectorStore`): documents with their chunks in one transaction per batch,
    keyed by (collection, doc id) and content hash, and the staging of a large document's chunks.

    Every method raises `tools.errors.StoreError` (`StoreUnavailableError` while the store is down) on failure, with
    nothing half-written.
    """

    async def stored_versions(self, doc_ids: list[str], collection: str = DEFAULT_COLLECTION) -> dict[str, str]:
        """doc_id -> stored content hash (sha256 hex) for those of `doc_ids` stored in `collection` (a hint)."""
        ...

    async def chunk_vectors(
        self, doc_ids: list[str], collection: str = DEFAULT_COLLECTION
    ) -> dict[str, dict[str, npt.NDArray[np.float32]]]:
        """doc_id -> {sha256 hex of a chunk's text: its stored embedding} for those of `doc_ids` stored in
        `collection` (the vectors a changed document reuses, `tools.ingest.reuse`)."""
        ...

    async def add_documents(
        self, docs: Sequence[DocumentRecord], unchanged: Hashes | None = None, *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Store `docs` in `collection` in one transaction: the same content hash is skipped, another replaces the
        stored version; each of `unchanged` (doc_id -> hash, sent without chunks) counts as skipped if still stored
        with that hash, else its id is in `IngestCounts.missing`."""
        ...

    async def resume_point(self, doc: StagedDocument, collection: str = DEFAULT_COLLECTION) -> int:
        """Chunks of `doc` (its content hash) left staged in `collection` by an earlier run, as n for indexes
        0..n-1; staged chunks of another hash are dropped."""
        ...

    async def stage_chunks(self, rows: Sequence[StagedRow]) -> None:
        """Stage one sub-batch of embedded chunks (all or nothing)."""
        ...

    async def commit_staged(self, doc: StagedDocument, collection: str = DEFAULT_COLLECTION) -> int:
        """Store `doc`'s staged chunks in `collection` in one transaction, replacing a stored version, and drop the
        staged rows; returns the chunks stored."""
        ...


class SyncLedger(Protocol):
    """What a folder sync needs of the store's sync state (`tools.store.sync_state.PostgresSyncLedger`): the synced
    folders (sources) and each file's recorded state, one sync of a source at a time, and every change of a file
    written together with its document (one transaction: an interrupted sync leaves each file done or untouched).

    A source owns the documents its file states name (status `stored`); removing a file's document spares one that
    another source of the same collection also names. Every method raises `tools.store.StoreError` on failure, with
    nothing half-written.
    """

    async def setup(self) -> None:
        """Make the ledger ready (idempotent)."""
        ...

    def exclusive(self, folder: str, collection: str) -> AbstractAsyncContextManager[None]:
        """Hold the lock of the source of `folder` (absolute) in `collection` while the block runs: a second holder
        of the same source waits until the first block ends (another source does not)."""
        ...

    async def find_source(self, folder: str, collection: str) -> SyncSource | None:
        """The source of `folder` (absolute) in `collection`, or None when it was never synced."""
        ...

    async def open_source(
        self, folder: str, collection: str, root: str, prefix: str, include: Sequence[str], exclude: Sequence[str]
    ) -> int:
        """The id of the source of `folder` in `collection`, created when new; its naming options and globs set to
        this run's."""
        ...

    async def files(self, source_id: int) -> dict[str, FileState]:
        """rel_path -> the state last recorded of it, for source `source_id` (the plan's input)."""
        ...

    async def finished(self, source_id: int) -> None:
        """Record that a sync of source `source_id` ran to its end."""
        ...

    async def store_file(
        self, source_id: int, collection: str, state: FileState, record: DocumentRecord | None
    ) -> StoredFile:
        """Write `record` and the file's `state` together (`record` None: the document is stored unchanged with
        `state.content_hash`; status `empty` or `skipped`: no document); the document the file's recorded state
        owned goes with it when it is not the one written, unless another source of the collection names it.

        Returns:
            The write's counts and the doc id removed (or None). With `record` None and the document no longer
            stored with that hash, its id is in `counts.missing` and nothing is written.
        """
        ...

    async def touch(self, source_id: int, state: FileState) -> None:
        """Record a file's new stat (its bytes unchanged): no document is written."""
        ...

    async def move(
        self, source_id: int, collection: str, old: FileState, new: FileState, path: str, record: DocumentRecord | None
    ) -> IngestCounts:
        """Move the document of `old` to `new.doc_id` (a renamed file) together with the state rows: `record` None
        keeps its chunks and vectors (doc id updated, `source` set to `path`, the new file's; a document already
        under the new id is replaced), else `record` replaces both.

        Returns:
            The write's counts; with `record` None and no document under `old.doc_id`, `missing` holds it and
            nothing is written.
        """
        ...

    async def remove(self, source_id: int, collection: str, state: FileState) -> bool:
        """A file gone: its document (when `state` is `stored`, unless another source of the collection names it)
        and its state go together; returns whether a document was deleted."""
        ...


class KeptOriginals(Protocol):
    """Where the original files of stored documents are kept, by (collection, doc id) (`tools.originals.Originals`
    on the file system): a sync and a job keep, move and remove them with their documents. Blocking calls (a caller
    on an event loop runs them in a worker thread)."""

    def keep(self, collection: str, doc_id: str, source: Path | bytes) -> object:
        """Keep `source` (a file, or the bytes) as the original of (`collection`, `doc_id`), replacing any.

        Raises:
            OSError: the file cannot be read or the original cannot be written.
        """
        ...

    def keep_files(self, collection: str, files: list[tuple[str, Path]]) -> None:
        """Keep each `(doc id, file)` of `files` (the ingest pipeline's `on_stored` hook); one that fails is logged
        and left out."""
        ...

    def move(self, collection: str, old_id: str, new_id: str) -> None:
        """Rename the original of `old_id` to `new_id` (nothing when none is kept).

        Raises:
            OSError: the rename fails.
        """
        ...

    def remove(self, collection: str, doc_id: str) -> bool:
        """Delete the original of (`collection`, `doc_id`); returns whether one was kept."""
        ...

    def read(self, collection: str, doc_id: str) -> bytes | None:
        """The bytes of the kept original, or None when none is kept."""
        ...


@dataclass(frozen=True)
class IngestOptions:
    """How one ingest run chunks, batches and stores (built once from the settings: `agent.core.wiring`).

    Attributes:
        chunk_tokens, overlap_tokens: chunk window and overlap in embedder tokens (`CHUNK_TOKENS`,
            `CHUNK_OVERLAP_TOKENS`); a window above the model limit minus 2 is clamped (`tools.chunking.fit_window`).
        batch_docs: documents per embed call and per store transaction (`INGEST_BATCH_DOCS`).
        prefetch: batches chunked and embedded ahead of the one being stored (>= 1); memory holds at most
            prefetch + 1 batches.
        sample_size: embedded chunk texts kept in `IngestReport.sample` (a reservoir sample).
        max_file_bytes: a larger document file fails alone (`INGEST_MAX_FILE_BYTES`).
        ocr: how PDF pages without a text layer and images are read (`OCR`, `OCR_LANGUAGE`, `OCR_DPI`, ...).
        collection: the collection every document of the run goes into (`tools.scope.check_collection`).
        ignore: file name globs a folder sync leaves out unless an `--include` glob names the file (`SYNC_IGNORE`,
            default `tools.ingest.inputs.TEMPORARY_NAMES`: backups, lock files, partial downloads).
        settle_s: a folder sync reads a file modified less than this many seconds ago only once its size and mtime
            stayed the same that long; one still changing is not yet there (`SYNC_SETTLE_S`).
        groups: the groups allowed to read every document of the run (the metadata key `groups`,
            `tools.ingest.groups`); None: each document's own metadata decides (none: public).
    """

    chunk_tokens: int
    overlap_tokens: int
    batch_docs: int = 64
    prefetch: int = 1
    sample_size: int = 256
    max_file_bytes: int = MAX_FILE_BYTES
    collection: str = DEFAULT_COLLECTION
    ocr: OcrOptions = field(default_factory=OcrOptions)
    ignore: tuple[str, ...] = TEMPORARY_NAMES
    settle_s: float = 1.0
    groups: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        """Raises ValueError for batch_docs or prefetch below 1, or a chunk window `check_window` refuses."""
        if self.batch_docs < 1 or self.prefetch < 1:
            raise ValueError(f"batch_docs={self.batch_docs}, prefetch={self.prefetch}; expected both >= 1")
        check_window(self.chunk_tokens, self.overlap_tokens)


@runtime_checkable
class DocumentGroups(Protocol):
    """What changes the groups allowed to read a stored document (`tools.access`): the store
    (`tools.store.VectorStore`), the in-memory doubles."""

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION
    ) -> bool:
        """Set the groups of document `doc_id` of `collection` (`tools.access.document_groups`: none given is
        `PUBLIC_GROUP`) on the document and its chunks, in one transaction, without re-embedding; False when no such
        document is stored.

        Raises:
            tools.access.AccessError: an invalid group name.
            StoreError: the write failed.
        """
        ...


def document_groups_port(store: object) -> DocumentGroups:
    """`store` as a `DocumentGroups`.

    Raises:
        StoreError: `store` cannot change documents' groups (a store built before documents carried groups).
    """
    if not isinstance(store, DocumentGroups):
        raise StoreError(f"{type(store).__name__} cannot change documents' groups (no set_document_groups)")
    return store
