"""One entry point: a file and its sniffed kind in, an `Extracted` out, by the format's reader
(`tools.extract.formats`)."""

from __future__ import annotations

from pathlib import Path

from tools.extract.base import Extracted, ExtractError
from tools.extract.formats import REFUSED, Kind, format_of
from tools.extract.ocr import OcrOptions

__all__ = ["REFUSED", "extract"]


def extract(path: Path, kind: Kind, max_bytes: int, ocr: OcrOptions | None = None) -> Extracted:
    """The text and structure of the file `path` of sniffed `kind` (not `jsonl`: its records are documents of
    their own, read by `tools.jsonl`).

    Args:
        max_bytes: the largest file accepted, bytes (a bound on the memory one extraction takes).
        ocr: how PDF pages without a text layer and images are read (`OcrOptions()` when None).

    Raises:
        ExtractError: a refused kind (see `REFUSED`), a file over `max_bytes`, or what the format's extractor
            raises (corrupt, encrypted, no text, no main content, not UTF-8, OCR off or failed).
        OSError: the file cannot be read.
    """
    if kind == "zip" and path.suffix.lower() == ".docx":
        raise ExtractError(
            f"{path}: not a readable DOCX (a ZIP archive without word/document.xml: corrupt or truncated)"
        )
    if kind in REFUSED:
        raise ExtractError(f"{path}: {REFUSED[kind]}")
    size = path.stat().st_size
    if size > max_bytes:
        raise ExtractError(f"{path}: {size} bytes, over the limit of {max_bytes} bytes (INGEST_MAX_FILE_BYTES)")
    document_format = format_of(kind)
    if document_format is None or document_format.read is None:
        raise ExtractError(f"{path}: {kind} content is not read as one document")
    return document_format.read(path, ocr)
