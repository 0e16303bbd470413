"""JSON Lines records with their line numbers: the one reader behind ingestion and the dataset loaders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    """A JSON Lines file has a line that is not a JSON object with `_id`; the message names `path:line`."""


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, record) for each non-blank line of `path`, read as UTF-8.

    Raises:
        JsonlError: invalid JSON, or a line that is not an object with an `_id` key.
        UnicodeDecodeError / OSError: the file is not UTF-8 text or cannot be read.
    """
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise JsonlError(f"{path}:{lineno}: invalid JSON: {exc}") from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise JsonlError(f"{path}:{lineno}: expected a JSON object with '_id'")
            yield lineno, record
