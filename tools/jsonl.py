"""JSON Lines records with their line numbers: the one reader behind ingestion and the dataset loaders.

Input rules (the same for every caller): the file is read as bytes, one line at a time (memory bounded by the
longest line); a UTF-8 byte order mark at the start of the file is ignored; a line that is not valid UTF-8 is
refused with the file, the line and the byte offset in the file (never replaced silently).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    """A JSON Lines file has a line that is not UTF-8, not JSON, or not an object with `_id`; names `path:line`."""


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, record) for each non-blank line of `path`.

    Raises:
        JsonlError: invalid UTF-8 (names the byte offset from the start of the file), invalid JSON, or a line that
            is not an object with an `_id` key.
        OSError: the file cannot be read.
    """
    offset = 0
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            start = offset
            offset += len(raw)
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw, start = raw[len(codecs.BOM_UTF8) :], start + len(codecs.BOM_UTF8)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise JsonlError(
                    f"{path}:{lineno}: not valid UTF-8 at byte {start + exc.start} of the file ({exc.reason}); "
                    f"expected UTF-8 text"
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise JsonlError(f"{path}:{lineno}: invalid JSON: {exc}") from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise JsonlError(f"{path}:{lineno}: expected a JSON object with '_id'")
            yield lineno, record
