"""PDF: the text layer, page by page, with PDFium (`pypdfium2`).

Chosen over `pypdf` for speed at equal fidelity (measured by `python -m evals.extract_bench`, results in
`evals/results/extract_bench.json` and the README). PDFium reads the file through a file handle, one page at a time,
so memory holds one page's text objects (plus the text kept). PDFium is not thread-safe: one lock serialises every
call into it in this process.

Layout models that would need downloaded weights are left out: a page without a text layer (a scan) is reported as
such, since there is no OCR here.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pypdfium2 as pdfium

from tools.extract.base import Extracted, ExtractError, Section, tidy

_LOCK = threading.Lock()
_PEEK_BYTES = 65_536
_NO_PAGES = re.compile(rb"/Type\s*/Pages\b[^>]*?/Count\s+0\b|/Count\s+0\b[^>]*?/Type\s*/Pages\b")
_SOFT_HYPHEN_BREAK = "\ufffe\r\n"
"""PDFium marks a word hyphenated across a line end with U+FFFE before the line break: the word is rejoined."""


def _page_text(document: pdfium.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            raw: str = textpage.get_text_range()
        finally:
            textpage.close()
    finally:
        page.close()
    return tidy(raw.replace(_SOFT_HYPHEN_BREAK, "").replace("\ufffe", "").replace("\x02", ""))


def _load_failure(path: Path, exc: pdfium.PdfiumError) -> str:
    """Why PDFium could not open `path`. PDFium's error code is process-wide state that a failed load does not
    always reset (an empty document fails with the code of the previous failure), so the cause is read from the
    file's own dictionaries where it can be: an `/Encrypt` entry in a trailer (ISO 32000-1 §7.6.1) or a page tree
    with `/Count 0` (§7.7.3.2), looked for in the first and last `_PEEK_BYTES` bytes."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(_PEEK_BYTES)
        handle.seek(max(0, size - _PEEK_BYTES))
        tail = handle.read(_PEEK_BYTES)
    if b"/Encrypt" in head or b"/Encrypt" in tail:
        return "the PDF is encrypted (password-protected); expected an unprotected PDF"
    if _NO_PAGES.search(head) or _NO_PAGES.search(tail):
        return "the PDF has no pages"
    return f"not a readable PDF ({exc}); the file is corrupt or truncated"


def _title(document: pdfium.PdfDocument) -> str:
    try:
        title = str(document.get_metadata_dict().get("Title", "")).strip()
    except pdfium.PdfiumError:
        return ""
    return title


def extract_pdf(path: Path) -> Extracted:
    """Text of every page of `path`, pages joined by a blank line; one `Section` per page that has text.

    The title is the document information `Title` when set, else the first line of text.

    Raises:
        ExtractError: not a PDF PDFium can read (corrupt or truncated), encrypted with a password, no pages, or no
            text layer on any page (a scan; no OCR here).
    """
    with _LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as exc:
            raise ExtractError(f"{path}: {_load_failure(path, exc)}") from None
        try:
            pages = len(document)
            texts = [_page_text(document, i) for i in range(pages)]
            title = _title(document)
        except pdfium.PdfiumError as exc:
            raise ExtractError(f"{path}: a page cannot be read ({exc}); the file is corrupt") from None
        finally:
            document.close()
    if pages == 0:
        raise ExtractError(f"{path}: the PDF has no pages")
    if not any(texts):
        raise ExtractError(
            f"{path}: no text layer on any of its {pages} page(s) (a scanned PDF?), and no OCR here; "
            "expected a PDF with selectable text"
        )
    parts: list[str] = []
    sections: list[Section] = []
    offset = 0
    for number, text in enumerate(texts, 1):
        if not text:
            continue
        if parts:
            offset += 2
        sections.append(Section(offset, page=number))
        parts.append(text)
        offset += len(text)
    body = "\n\n".join(parts)
    return Extracted(body, title or body.split("\n", 1)[0].strip(), tuple(sections), pages)
