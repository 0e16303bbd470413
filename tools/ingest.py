"""Ingestion: read files, chunk by embedder tokens, embed on Triton, store in batches keyed by content hash.

Supported inputs: `.jsonl` in BEIR corpus form (`{"_id", "title", "text"}` per line), `.txt` and `.md` (one
document per file; doc id = file name without extension, title = first line of Markdown heading or file name).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.chunking import chunk_text, fit_window
from tools.embedder import TritonEmbedder
from tools.jsonl import JsonlError, read_records
from tools.store import ChunkRecord, DocumentRecord, IngestCounts, VectorStore

SUPPORTED_SUFFIXES = (".jsonl", ".txt", ".md")


class IngestError(ValueError):
    """An input cannot be ingested: missing, unreadable, unsupported or malformed (names file and line)."""


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


def read_documents(path: Path) -> Iterator[SourceDocument]:
    """Documents in `path`.

    Raises:
        IngestError: invalid UTF-8, invalid JSON, or a JSONL record without `_id` / `text` (names the line).
    """
    try:
        if path.suffix.lower() == ".jsonl":
            for lineno, record in read_records(path):
                if "text" not in record:
                    raise IngestError(f"{path}:{lineno}: expected a BEIR corpus record {{'_id', 'title', 'text'}}")
                doc_id, text, title = str(record["_id"]), str(record["text"]), str(record.get("title") or "")
                if text.strip() or title.strip():
                    yield SourceDocument(doc_id, title, text, str(path), dict(record.get("metadata") or {}))
        else:
            text = path.read_text(encoding="utf-8")
            title = path.stem
            first = text.lstrip().splitlines()[0] if text.strip() else ""
            if path.suffix.lower() == ".md" and first.startswith("#"):
                title = first.lstrip("#").strip()
            if text.strip():
                yield SourceDocument(path.stem, title, text, str(path), {})
    except JsonlError as exc:
        raise IngestError(f"{exc} (expected a BEIR corpus record {{'_id', 'title', 'text'}})") from exc
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not valid UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise IngestError(f"{path}: cannot be read ({exc.strerror})") from exc


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
        documents: the batch.
        chunk_tokens, overlap_tokens: chunk window in embedder tokens; a window above the model limit minus 2 is
            clamped to it and the overlap shrinks in proportion (`tools.chunking.fit_window`).
    """
    documents = list({d.doc_id: d for d in documents}.values())  # a repeated doc_id: the last one wins
    stored = await store.stored_versions([d.doc_id for d in documents])
    todo = [d for d in documents if stored.get(d.doc_id) != d.content_hash]
    window, overlap = fit_window(chunk_tokens, overlap_tokens, embedder.spec.max_tokens)
    pieces = [chunk_text(d.content, embedder.tokenizer, window, overlap) for d in todo]
    texts = [c.text for chunks in pieces for c in chunks]
    vectors = await embedder.embed(texts, kind="document") if texts else None
    records: list[DocumentRecord] = []
    row = 0
    for doc, chunks in zip(todo, pieces, strict=True):
        chunk_records = []
        for c in chunks:
            assert vectors is not None
            chunk_records.append(ChunkRecord(c.index, c.text, c.token_count, vectors[row]))
            row += 1
        records.append(DocumentRecord(doc.doc_id, doc.title, doc.source, doc.content_hash, chunk_records, doc.metadata))
    counts = await store.add_documents(records) if records else IngestCounts()
    return IngestCounts(added=counts.added, skipped=counts.skipped + len(documents) - len(todo), chunks=counts.chunks)
