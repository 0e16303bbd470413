"""What ingestion needs of the outside world: an embedder for documents and a chunk sink, and one options object.

The pipeline (`tools.ingest.pipeline`) depends on these two protocols only. `tools.embedder.TritonEmbedder` and
`tools.store.VectorStore` implement them over Triton and Postgres; `tools.in_memory_sink.InMemorySink` (with any
embedder) keeps the pipeline's own logic testable without a server, and one contract suite
(`tests/contracts/test_chunk_sink.py`) runs over both sinks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from tools.chunking import check_window
from tools.extract import MAX_FILE_BYTES
from tools.extract.ocr import OcrOptions
from tools.ingest.inputs import TEMPORARY_NAMES
from tools.model_specs import EmbeddingModelSpec
from tools.records import DocumentRecord, IngestCounts, StagedDocument, StagedRow, TextKind
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
        self,
        docs: Sequence[DocumentRecord],
        unchanged: Mapping[str, str] | None = None,
        *,
        collection: str = DEFAULT_COLLECTION,
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

    def __post_init__(self) -> None:
        """Raises ValueError for batch_docs or prefetch below 1, or a chunk window `check_window` refuses."""
        if self.batch_docs < 1 or self.prefetch < 1:
            raise ValueError(f"batch_docs={self.batch_docs}, prefetch={self.prefetch}; expected both >= 1")
        check_window(self.chunk_tokens, self.overlap_tokens)
