"""What one ingest run did: documents, chunks, files per type, per-file errors, throughput."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tools.ingest.embedding import BadChunk


@dataclass
class FileCounts:
    """Files of one type: `stored` (written, new or changed), `unchanged` (already stored with the same content),
    `skipped` (unsupported type, not read), `failed` (an error, nothing of it stored)."""

    stored: int = 0
    unchanged: int = 0
    skipped: int = 0
    failed: int = 0


@dataclass(frozen=True)
class FileError:
    """A file that was not stored, and why: `kind` is its sniffed type, `reason` names the file and the cause."""

    path: str
    kind: str
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
        files: per sniffed type (`pdf`, `html`, `docx`, `markdown`, `text`, `jsonl`, `unsupported`, ...), the
            files stored, unchanged, skipped and failed.
        file_errors: files that failed (extraction or read errors) and files skipped as unsupported.
        pages: PDF pages and image frames extracted; extract_s: seconds spent extracting them (wall time, in a
            worker thread); ocr_pages: of those pages, the ones read by OCR (`tools.extract.ocr`), and ocr_s: of
            that time, the seconds OCR took.
        resumed_chunks: chunks of large documents found staged by an interrupted run, not embedded again.
        reused_chunks: chunks of changed documents whose text the stored version held: its vector was reused, the
            chunk not embedded again (`tools.ingest.reuse`); counted in `chunks`.
        wall_s: wall time of the run, seconds.
        sample: up to `sample_size` chunk texts embedded in this run, drawn uniformly (reservoir sampling,
            Vitter 1985, algorithm R), for measuring the in-process ceiling on the same text lengths.
    """

    documents: int = 0
    added: int = 0
    skipped: int = 0
    chunks: int = 0
    failed: list[BadChunk] = field(default_factory=list)
    files: dict[str, FileCounts] = field(default_factory=dict)
    file_errors: list[FileError] = field(default_factory=list)
    pages: int = 0
    extract_s: float = 0.0
    ocr_pages: int = 0
    ocr_s: float = 0.0
    resumed_chunks: int = 0
    reused_chunks: int = 0
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

    @property
    def pages_per_s(self) -> float:
        """PDF pages extracted per second of extraction time (0 when no PDF was read)."""
        return self.pages / self.extract_s if self.extract_s > 0 else 0.0

    @property
    def ocr_pages_per_s(self) -> float:
        """Pages read by OCR per second of OCR time (0 when none was)."""
        return self.ocr_pages / self.ocr_s if self.ocr_s > 0 else 0.0

    @property
    def any_failed(self) -> bool:
        """Whether a file or a document failed (the exit code of `rag ingest` says so)."""
        return bool(self.failed) or any(c.failed for c in self.files.values())

    def count(self, kind: str) -> FileCounts:
        """The counts of files of `kind`, created on first use."""
        return self.files.setdefault(kind, FileCounts())


ProgressFn = Callable[[int, int, int], None]
"""Called as `(documents handled, documents in all inputs, chunks written)` after each stored batch."""
