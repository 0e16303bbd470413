"""One entry point: a file and its sniffed kind in, an `Extracted` out."""

from __future__ import annotations

from pathlib import Path

from tools.extract.base import Extracted, ExtractError
from tools.extract.encoding import decode_text
from tools.extract.ocr import OcrOptions
from tools.extract.sniff import Kind

REFUSED: dict[str, str] = {
    "empty": "the file is empty (0 bytes)",
    "zip": "a ZIP archive, not a document (expected PDF, HTML, DOCX, Markdown, text, JSONL or PNG/JPEG/TIFF "
    "content)",
    "ole": "an OLE compound file: a password-encrypted Office document or a legacy .doc/.xls; expected an "
    "unencrypted .docx",
    "unsupported": "binary content of an unsupported type (expected PDF, HTML, DOCX, Markdown, text, JSONL or a "
    "PNG/JPEG/TIFF image)",
}
"""Why a sniffed kind that is no document is refused."""


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
    if kind == "pdf":
        from tools.extract.pdf import extract_pdf

        return extract_pdf(path, ocr)
    if kind == "image":
        from tools.extract.image import extract_image

        return extract_image(path, ocr)
    if kind == "docx":
        from tools.extract.docx import extract_docx

        return extract_docx(path)
    if kind == "html":
        from tools.extract.html import extract_html

        return extract_html(path, path.read_bytes())
    text = decode_text(path, path.read_bytes())
    if kind == "markdown":
        from tools.extract.markdown import extract_markdown

        return extract_markdown(text, path.stem)
    if kind == "text":
        return Extracted(text, path.stem)
    raise ExtractError(f"{path}: {kind} content is not read as one document")
