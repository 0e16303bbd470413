"""The document formats, one registry: for each, the kind `sniff` names it by, the file name suffixes that claim it,
how it is read, and what its documents have (structure, pages, page images). Adding a format is one `Format` here
(and its signature in `tools.extract.sniff`); every list of formats reads this one: the extractor dispatch
(`tools.extract.dispatch`), the suffixes that make a non-document a failure rather than a skip
(`tools.ingest.inputs`), the page counts of a run (`tools.ingest.pipeline`), the pages that can be shown
(`agent.core.pages`), and the reasons a file is refused. `tests/tools/extract/test_formats.py` checks that the
pages and help texts that list the formats name every one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tools.extract.base import Extracted

if TYPE_CHECKING:
    from tools.extract.ocr import OcrOptions

Kind = Literal["pdf", "docx", "html", "jsonl", "markdown", "text", "image", "zip", "ole", "empty", "unsupported"]
"""What `tools.extract.sniff` finds: a format of `FORMATS`, or content refused with a reason (`REFUSED`)."""

Reader = Callable[[Path, "OcrOptions | None"], Extracted]
"""Reads one file of a format: `(path, ocr options) -> Extracted` (see `tools.extract.dispatch.extract`)."""


@dataclass(frozen=True)
class Format:
    """One document format.

    Attributes:
        kind: what `sniff` names its content.
        name: how messages and pages name it (`PDF`, `Markdown`, `PNG/JPEG/TIFF images`).
        suffixes: file name suffixes (lower case, with the dot) that claim it: a file so named whose content is no
            document fails with the cause instead of being skipped.
        read: its extractor, imported when first called (the libraries are heavy); None for JSONL, whose records
            are documents of their own (`tools.jsonl`).
        text: its content is text, so the name picks among the text formats (`.md` Markdown, `.jsonl` JSONL) and a
            file so named that no encoding reads keeps this kind, so that its reader names the offending byte.
        structured: the extractor finds a title and structure (pages or headings): the document's text starts with
            its title and its metadata records the format.
        paged: its documents have pages (PDF pages, image frames), counted with the run's extraction time.
        renderable: a page of a kept original can be drawn as an image (`tools.render_page`).
    """

    kind: Kind
    name: str
    suffixes: tuple[str, ...]
    read: Reader | None
    text: bool = False
    structured: bool = False
    paged: bool = False
    renderable: bool = False


def _read_pdf(path: Path, ocr: OcrOptions | None) -> Extracted:
    from tools.extract.pdf import extract_pdf

    return extract_pdf(path, ocr)


def _read_html(path: Path, ocr: OcrOptions | None) -> Extracted:
    from tools.extract.html import extract_html

    return extract_html(path, path.read_bytes())


def _read_docx(path: Path, ocr: OcrOptions | None) -> Extracted:
    from tools.extract.docx import extract_docx

    return extract_docx(path)


def _read_markdown(path: Path, ocr: OcrOptions | None) -> Extracted:
    from tools.extract.encoding import decode_text
    from tools.extract.markdown import extract_markdown

    return extract_markdown(decode_text(path, path.read_bytes()), path.stem)


def _read_text(path: Path, ocr: OcrOptions | None) -> Extracted:
    from tools.extract.encoding import decode_text

    return Extracted(decode_text(path, path.read_bytes()), path.stem)


def _read_image(path: Path, ocr: OcrOptions | None) -> Extracted:
    from tools.extract.image import extract_image

    return extract_image(path, ocr)


FORMATS: dict[Kind, Format] = {
    f.kind: f
    for f in (
        Format("pdf", "PDF", (".pdf",), _read_pdf, structured=True, paged=True, renderable=True),
        Format("html", "HTML", (".html", ".htm", ".xhtml"), _read_html, structured=True),
        Format("docx", "DOCX", (".docx",), _read_docx, structured=True),
        Format("markdown", "Markdown", (".md", ".markdown"), _read_markdown, text=True),
        Format("text", "text", (".txt", ".text"), _read_text, text=True),
        Format("jsonl", "JSONL", (".jsonl",), None, text=True),
        Format(
            "image",
            "PNG/JPEG/TIFF images",
            (".png", ".jpg", ".jpeg", ".tif", ".tiff"),
            _read_image,
            structured=True,
            paged=True,
            renderable=True,
        ),
    )
}
"""Every document format, by kind, in the order messages list them."""

DOCUMENT_KINDS: tuple[Kind, ...] = tuple(FORMATS)
"""The kinds that are documents (ingested); `sniff`'s other kinds are refused (`REFUSED`)."""
DOCUMENT_SUFFIXES: tuple[str, ...] = tuple(s for f in FORMATS.values() for s in f.suffixes)
"""Names that claim a document type: such a file whose content is no document is a failure, not a skip."""
TEXT_SUFFIXES: dict[str, Kind] = {s: f.kind for f in FORMATS.values() if f.text for s in f.suffixes}
"""Suffix -> the text format it names (`.md` Markdown, `.jsonl` JSONL, `.txt` text)."""
FORMAT_NAMES = ", ".join(f.name for f in list(FORMATS.values())[:-1]) + f" or {list(FORMATS.values())[-1].name}"
"""The formats as prose lists them: `PDF, HTML, DOCX, Markdown, text, JSONL or PNG/JPEG/TIFF images`."""

REFUSED: dict[Kind, str] = {
    "empty": "the file is empty (0 bytes)",
    "zip": f"a ZIP archive, not a document (expected {FORMAT_NAMES})",
    "ole": "an OLE compound file: a password-encrypted Office document or a legacy .doc/.xls; expected an "
    "unencrypted .docx",
    "unsupported": f"binary content of an unsupported type (expected {FORMAT_NAMES})",
}
"""Why a sniffed kind that is no document is refused."""


def format_of(kind: Kind) -> Format | None:
    """The format of sniffed `kind`, or None for a refused kind (`REFUSED`)."""
    return FORMATS.get(kind)


def is_structured(kind: Kind) -> bool:
    """Whether documents of `kind` carry a title and structure (`Format.structured`); False for a refused kind."""
    return (f := FORMATS.get(kind)) is not None and f.structured


def is_paged(kind: Kind) -> bool:
    """Whether documents of `kind` have pages (`Format.paged`); False for a refused kind."""
    return (f := FORMATS.get(kind)) is not None and f.paged


def is_renderable(kind: Kind) -> bool:
    """Whether a page of a kept original of `kind` can be drawn (`Format.renderable`); False for a refused kind."""
    return (f := FORMATS.get(kind)) is not None and f.renderable
