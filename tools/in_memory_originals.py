"""Kept originals held in memory: the `tools.ingest.ports.KeptOriginals` of `tools.originals.Originals`, with no
folder. For the sync's and the job worker's logic in the fast tier; the contract suite
(`tests/contracts/test_originals.py`) holds it to the file system's behaviour."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tools.scope import check_collection

log = logging.getLogger(__name__)


@dataclass
class InMemoryOriginals:
    """Originals' bytes by (collection, doc id).

    Attributes:
        kept: the bytes of each kept original.
    """

    kept: dict[tuple[str, str], bytes] = field(default_factory=dict)

    def keep(self, collection: str, doc_id: str, source: Path | bytes) -> None:
        """Keep `source` (a file, or the bytes) as the original of (`collection`, `doc_id`), replacing any.

        Raises:
            ScopeError: an invalid collection name. OSError: the file cannot be read.
        """
        check_collection(collection)
        self.kept[collection, doc_id] = source if isinstance(source, bytes) else Path(source).read_bytes()

    def keep_files(self, collection: str, files: list[tuple[str, Path]]) -> None:
        """Keep each `(doc id, file)`; one that cannot be read is logged and left out."""
        for doc_id, source in files:
            try:
                self.keep(collection, doc_id, source)
            except OSError as exc:
                log.warning("%s: its original could not be kept (%s)", source, exc)

    def move(self, collection: str, old_id: str, new_id: str) -> None:
        """Rename the original of `old_id` to `new_id` (nothing when none is kept).

        Raises:
            ScopeError: an invalid collection name (as `Originals.path`).
        """
        check_collection(collection)
        data = self.kept.pop((collection, old_id), None)
        if data is not None:
            self.kept[collection, new_id] = data

    def remove(self, collection: str, doc_id: str) -> bool:
        """Delete the original; whether one was kept.

        Raises:
            ScopeError: an invalid collection name.
        """
        check_collection(collection)
        return self.kept.pop((collection, doc_id), None) is not None

    def read(self, collection: str, doc_id: str) -> bytes | None:
        """The kept original's bytes, or None.

        Raises:
            ScopeError: an invalid collection name.
        """
        check_collection(collection)
        return self.kept.get((collection, doc_id))
