"""Text and structure out of document files: PDF (text layer, page by page), HTML (main content), DOCX (headings,
paragraphs, tables), Markdown, text and PNG/JPEG/TIFF images (OCR); JSONL records are read by `tools.jsonl`. The
formats are one registry (`formats.FORMATS`: suffixes, reader, structured / paged / renderable). The file type is
sniffed from the content (`sniff`), never taken from the name; `extract` dispatches to the reader of that type.

Every extractor returns an `Extracted`: the document's text, its title and its `Section`s (character offsets into
the text where a page or a heading's section starts), which the chunker keeps to the citation (`p. 12`,
`Guide › Install › Linux`). Extraction is synchronous and CPU-bound: callers run it off the event loop (a thread).
"""

from tools.extract.base import MAX_FILE_BYTES, Extracted, ExtractError, Layout, Section
from tools.extract.dispatch import extract
from tools.extract.formats import DOCUMENT_KINDS, DOCUMENT_SUFFIXES, FORMATS, REFUSED, Format, Kind
from tools.extract.sniff import sniff, sniff_bytes

__all__ = [
    "DOCUMENT_KINDS",
    "DOCUMENT_SUFFIXES",
    "FORMATS",
    "MAX_FILE_BYTES",
    "REFUSED",
    "ExtractError",
    "Extracted",
    "Format",
    "Kind",
    "Layout",
    "Section",
    "extract",
    "sniff",
    "sniff_bytes",
]
