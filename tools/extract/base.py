"""What an extractor returns, and the error it raises."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Extracted:
    """A document as text: `text` (UTF-8, `\\n` line ends), `title` (may be empty), `sections` in order of
    `start` (empty for plain text), `pages` (PDF page count, 0 for other types)."""

    text: str
    title: str = ""
    sections: tuple[Section, ...] = field(default=())
    pages: int = 0


_SPACES = re.compile(r"[ \t\f\v]+\n")
_BLANK_RUNS = re.compile(r"\n{3,}")


def tidy(text: str) -> str:
    """`text` with `\\r\\n`/`\\r` as `\\n`, trailing spaces of lines removed and runs of blank lines cut to one."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _BLANK_RUNS.sub("\n\n", _SPACES.sub("\n", text)).strip()
