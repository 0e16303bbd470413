"""What an extractor returns, and the error it raises."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

MAX_FILE_BYTES = 100 * 1024 * 1024
"""Default largest input file, bytes (`INGEST_MAX_FILE_BYTES`): a bound on the memory one extraction takes."""


class ExtractError(ValueError):
    """A file cannot be turned into text: corrupt, encrypted, empty, no text layer, no main content, over the size
    limit, or not of the type its content claims. The message names the file and the cause."""


@dataclass(frozen=True)
class Section:
    """Where a part of a document starts: `start` is a character offset into `Extracted.text`; `page` the 1-based
    PDF page, `path` the headings above it, outermost first (e.g. `("Guide", "Install", "Linux")`)."""

    start: int
    page: int | None = None
    path: tuple[str, ...] = ()

    def location(self) -> dict[str, object]:
        """The chunk metadata this section gives: `{"page": 12}`, `{"section": ["Guide", "Install"]}` or `{}`."""
        if self.page is not None:
            return {"page": self.page}
        if self.path:
            return {"section": list(self.path)}
        return {}


@dataclass(frozen=True, eq=False)
class Layout:
    """Where each character of a paged document's text stands on its page (PDF text layers and OCR'd pages).

    Attributes:
        pages: `(len(text),)` int32, the 1-based page of each character of `Extracted.text`; 0 for a character with
            no place on a page (the blank line joining two pages, a line break PDFium generated).
        boxes: `(len(text), 4)` float32, each character's box `(left, bottom, right, top)` in PDF points (1/72 in),
            page space with the origin at the page's bottom left, as PDFium's `FPDFText_GetCharBox` gives them;
            NaN rows where `pages` is 0.
        page_sizes: `(width, height)` in points of page n at index n - 1 (PDFium's `PdfPage.get_size`).
    """

    pages: npt.NDArray[np.int32]
    boxes: npt.NDArray[np.float32]
    page_sizes: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Extracted:
    """A document as text: `text` (UTF-8, `\\n` line ends), `title` (may be empty), `sections` in order of
    `start` (empty for plain text), `pages` (PDF page count, 0 for other types), `layout` (PDFs and images: each
    character's page and box, aligned with `text`; None for other types or where positions are unknown),
    `ocr_pages` (pages whose text was read by OCR, `tools.extract.ocr`) and `ocr_s` (wall seconds spent on OCR:
    rendering and Tesseract)."""

    text: str
    title: str = ""
    sections: tuple[Section, ...] = field(default=())
    pages: int = 0
    layout: Layout | None = None
    ocr_pages: int = 0
    ocr_s: float = 0.0


TRAILING_SPACES = re.compile(r"[ \t\f\v]+\n")
"""Spaces and tabs at the end of a line (with its line break), which `tidy` removes."""
BLANK_RUNS = re.compile(r"\n{3,}")
"""Runs of blank lines, which `tidy` cuts to one."""


def tidy(text: str) -> str:
    """`text` with `\\r\\n`/`\\r` as `\\n`, trailing spaces of lines removed and runs of blank lines cut to one."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return BLANK_RUNS.sub("\n\n", TRAILING_SPACES.sub("\n", text)).strip()
