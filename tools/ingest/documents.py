"""A document read from an input, before chunking, and the text rules every input follows.

Text rules: NUL characters and lone surrogates, which Postgres `text` cannot store, are removed with a WARNING naming
the file (and line).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from tools.extract import Layout, Section
from tools.highlight import line_boxes
from tools.language import document_language

log = logging.getLogger(__name__)

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL (Postgres `text` and `jsonb` reject it) and lone UTF-16 surrogates (not encodable as UTF-8)."""


class IngestError(ValueError):
    """An input cannot be ingested: missing, unreadable, unsupported, malformed, a repeated document id, or a file
    whose text cannot be extracted (the message names the file, and the line or byte offset where it applies)."""


@dataclass(frozen=True)
class SourceDocument:
    """A document read from a file, before chunking.

    Attributes:
        sections: where pages or heading sections start, as character offsets into `text` (empty: one part).
        title_in_text: `text` already holds the title (an extracted PDF, HTML or DOCX document): the content is
            `text` alone, else it is the title, a blank line and `text` (BEIR's document form).
        layout: each character of `text`'s page and box (a PDF's text layer, an OCR'd page; `tools.extract.Layout`,
            aligned with `text`), or None.
    """

    doc_id: str
    title: str
    text: str
    source: str
    metadata: dict[str, Any]
    sections: tuple[Section, ...] = field(default=())
    title_in_text: bool = False
    layout: Layout | None = field(default=None, compare=False, repr=False)

    @property
    def content(self) -> str:
        """The text that is chunked and hashed: see `title_in_text`."""
        return self.text if self.title_in_text or not self.title else f"{self.title}\n\n{self.text}"

    @property
    def content_hash(self) -> str:
        """sha256 hex of the content: the key of idempotent ingestion."""
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()

    def stored_metadata(self) -> dict[str, Any]:
        """The metadata stored with the document: `metadata`, with its `language` (ISO 639-1) detected from the
        content when not given (`tools.language.document_language`; left out when it cannot be told). The language
        chooses the full-text analysis of its chunks (`tools.language.text_search_config`)."""
        if "language" in self.metadata:
            return self.metadata
        language = document_language(self.content)
        return self.metadata if language is None else {**self.metadata, "language": language}

    def content_sections(self) -> tuple[Section, ...]:
        """`sections` with offsets into `content`: shifted past the title when the content starts with it, the
        title joining the section that starts the text."""
        shift = len(self.content) - len(self.text)
        if not shift:
            return self.sections
        return tuple(Section(s.start + shift if s.start else 0, s.page, s.path) for s in self.sections)


    def span_fields(self, start: int, end: int) -> dict[str, object]:
        """The chunk metadata that says where `content[start:end]` lies: `{"span": [start, end]}` (offsets into
        `content`), with `"boxes"` (`tools.highlight.line_boxes`: `[[page, left, bottom, right, top], ...]` in PDF
        points, one per text line) when the document has a layout and the span has characters on a page."""
        fields: dict[str, object] = {"span": [start, end]}
        if self.layout is not None:
            shift = len(self.content) - len(self.text)
            boxes = line_boxes(self.text, self.layout, max(0, start - shift), max(0, end - shift))
            if boxes:
                fields["boxes"] = boxes
        return fields


def clean_text(text: str, where: str) -> str:
    """`text` without characters Postgres cannot store (NUL, lone surrogates); a WARNING names `where` when any
    are removed."""
    cleaned, removed = _UNSTORABLE.subn("", text)
    if removed:
        log.warning("%s: removed %d NUL or unpaired-surrogate character(s) Postgres cannot store", where, removed)
    return cleaned


def clean_value(value: Any, where: str) -> Any:
    """A JSON value with `clean_text` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return clean_text(value, where)
    if isinstance(value, dict):
        return {clean_text(str(k), where): clean_value(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_value(v, where) for v in value]
    return value
