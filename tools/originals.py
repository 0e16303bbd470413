"""The original files of stored documents (uploads, ingested and synced files), kept so that a cited page can be
rendered later (`GET /v1/documents/{id}/pages/{n}`).

One file per (collection, doc id) under a root folder (the `ORIGINALS_DIR` setting):
`<root>/<collection>/<sha256(doc id) hex>`, with no suffix (the type is sniffed from the content when read, as at
ingest). Writes go to a temporary file in the same folder and are renamed into place (`os.replace`, atomic on POSIX),
so a reader never sees half a file and a crash leaves at most a `.tmp-*` file behind. The store's rows stay the
source of truth: a document without a kept original (ingested before originals were kept, or from JSONL) has none,
and callers say so.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from tools.scope import check_collection

log = logging.getLogger(__name__)


class OriginalsNotWritableError(OSError):
    """The originals folder (`ORIGINALS_DIR`) cannot be written by this process: kept files would be silently lost."""


class Originals:
    """Original files keyed by (collection, doc id) under `root` (created when first written): the
    `tools.ingest.ports.KeptOriginals` of the file system.

    Thread-safe for distinct keys; two writers of one key leave one of the two files whole.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def check_writable(self) -> None:
        """Create the root when missing and write, then remove, a probe file in it: a start-up check, so that a
        folder this user cannot write fails the start with what to do instead of every later keep failing.

        Raises:
            OriginalsNotWritableError: the root cannot be created or written.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(prefix=".write-check-", dir=self.root)
            os.close(handle)
            Path(probe).unlink()
        except OSError as exc:
            raise OriginalsNotWritableError(
                f"KEEP_ORIGINALS is on but ORIGINALS_DIR {self.root} is not writable by uid {os.getuid()} "
                f"({exc.strerror or exc}): give this user the folder (the production image creates "
                "/var/lib/rag/originals owned by uid 10001; on Kubernetes fsGroup and the init step of app.yaml), "
                "point ORIGINALS_DIR at a writable folder, or set KEEP_ORIGINALS=false"
            ) from exc

    def path(self, collection: str, doc_id: str) -> Path:
        """Where the original of (`collection`, `doc_id`) lives (whether or not it is there).

        Raises:
            ScopeError: `collection` is not a valid collection name.
        """
        check_collection(collection)
        return self.root / collection / hashlib.sha256(doc_id.encode("utf-8")).hexdigest()

    def find(self, collection: str, doc_id: str) -> Path | None:
        """The kept original's path, or None when none is kept."""
        path = self.path(collection, doc_id)
        return path if path.is_file() else None

    def read(self, collection: str, doc_id: str) -> bytes | None:
        """The bytes of the kept original, or None when none is kept.

        Raises:
            OSError: the kept file cannot be read.
        """
        path = self.find(collection, doc_id)
        if path is None:
            return None
        try:
            return path.read_bytes()
        except FileNotFoundError:  # removed meanwhile
            return None

    def keep(self, collection: str, doc_id: str, source: Path | bytes) -> Path:
        """Copy `source` (a file, or the bytes) as the original of (`collection`, `doc_id`), replacing any.

        Raises:
            OSError: the file cannot be read or the root cannot be written.
        """
        target = self.path(collection, doc_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                if isinstance(source, bytes):
                    out.write(source)
                else:
                    with Path(source).open("rb") as src:
                        shutil.copyfileobj(src, out)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return target

    def keep_files(self, collection: str, files: list[tuple[str, Path]]) -> None:
        """Keep each `(doc id, file)` of `files` as an original in `collection` (the ingest pipeline's `on_stored`
        hook). A file that cannot be copied is logged (WARNING) and left out: its document stays stored, without
        a page to render.
        """
        for doc_id, source in files:
            try:
                self.keep(collection, doc_id, source)
            except OSError as exc:
                log.warning("%s: its original could not be kept under %s (%s)", source, self.root, exc)

    def remove_all(self, doc_ids: list[str], collections: list[str] | tuple[str, ...] | None) -> int:
        """Delete the originals of `doc_ids` in `collections` (None: every collection kept under the root);
        returns how many were kept. A file that cannot be deleted is logged (WARNING)."""
        if collections is None:
            collections = sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []
        removed = 0
        for collection in collections:
            for doc_id in doc_ids:
                try:
                    removed += self.remove(collection, doc_id)
                except OSError as exc:
                    log.warning("the original of %r in %s could not be deleted (%s)", doc_id, collection, exc)
        return removed

    def move(self, collection: str, old_id: str, new_id: str) -> None:
        """Rename the original of `old_id` to `new_id` in `collection` (a moved document); nothing when none is kept.

        Raises:
            OSError: the rename fails.
        """
        old = self.find(collection, old_id)
        if old is not None:
            os.replace(old, self.path(collection, new_id))

    def remove(self, collection: str, doc_id: str) -> bool:
        """Delete the original of (`collection`, `doc_id`); returns whether one was kept."""
        path = self.path(collection, doc_id)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True
