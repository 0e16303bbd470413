"""What a folder sync has to do, decided from the folder and the recorded state alone (no store, no embedder): the
plan and the report of a sync (`tools.ingest.sync`).

A file whose size and mtime (ns) equal the recorded ones, under the same document id, is unchanged and is not read.
Any other file is read once and hashed (sha256 of its bytes): the same bytes as recorded is unchanged too (only its
stat is recorded again: `touched`), other bytes are an update, a path with no record is new. A recorded path gone
from the folder is removed, unless a new path has the same bytes: that pair is a move (the first gone path in name
order pairs with the first new one). A file whose document id changed (another `--prefix` or `--root`) with the same
bytes is a move too.

What the sync cannot see it does not remove: a recorded file under a folder that could not be listed (permissions,
I/O errors), or whose stat failed, keeps its document and the sync fails with the cause; so does a recorded file
under a subfolder that is now empty, with no entry at all (what an unmounted mount point looks like): delete the
subfolder itself to remove its documents. (The synced folder itself emptied is taken as every file deleted.)

Racy files (as git handles them): a file modified within `RACY_WINDOW_NS` of the sync's start may be written again
within the filesystem's mtime granularity after it was read, keeping its size and mtime; its state is recorded with
the mtime `RACY_MTIME_NS`, which no file has, so the next sync hashes it again (and then records its real stat).
"""

from __future__ import annotations

import hashlib
import os
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tools.extract import Kind, sniff
from tools.ingest.inputs import name_error, printable, walk_folder
from tools.ingest.report import FileError
from tools.records import FileState, FileStatus

RACY_WINDOW_NS = 2_000_000_000
"""A file whose mtime is within this many nanoseconds before the sync's start (or later) is racy (2 s: coarser than
any common filesystem's mtime granularity)."""

RACY_MTIME_NS = -1
"""The mtime recorded for a racy file: never equal to a file's, so the next sync reads it again."""


@dataclass(frozen=True)
class SeenFile:
    """A file found in the synced folder: its path, its path relative to the folder (POSIX), size (bytes) and
    mtime (ns)."""

    path: Path
    rel_path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Candidate:
    """A file to read: what was seen, the sha256 hex of its bytes, its sniffed type and its document id."""

    seen: SeenFile
    file_hash: str
    kind: Kind
    doc_id: str

    def state(self, content_hash: str | None, skipped: bool = False) -> FileState:
        """The state to record once its document (content hash; None: no text, no document) is stored, or once it
        is `skipped` (a type that is not synced)."""
        seen = self.seen
        status: FileStatus = "skipped" if skipped else "stored" if content_hash is not None else "empty"
        return FileState(seen.rel_path, seen.size, seen.mtime_ns, self.file_hash, self.doc_id, content_hash, status)


@dataclass
class SyncPlan:
    """The changes of one sync: `added` (new paths), `updated` (recorded paths whose bytes changed), `moved` (a
    recorded file and the candidate holding its bytes under a new path or id), `removed` (recorded paths gone),
    `touched` (same bytes, new stat: only the state is written), `unchanged` (rel paths not read or the same
    bytes), `skipped` (rel paths recorded as a type that is not synced, unchanged: not read), `failed` (files that
    could not be read), `outside` (symbolic links to files outside the folder, skipped: `scan_folder`), `pending`
    (files still being written, `settle`: not yet there, left for the next sync)."""

    added: list[Candidate] = field(default_factory=list)
    updated: list[tuple[FileState, Candidate]] = field(default_factory=list)
    moved: list[tuple[FileState, Candidate]] = field(default_factory=list)
    removed: list[FileState] = field(default_factory=list)
    touched: list[FileState] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[FileError] = field(default_factory=list)
    outside: list[FileError] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    groups_state: FileState | None = None
    """What the last sync recorded of the folder's groups rules (`tools.ingest.groups`: its `file_hash` is their
    fingerprint); None: never recorded."""

    @property
    def changes(self) -> int:
        """Files whose documents this plan writes (added, updated, moved, removed)."""
        return len(self.added) + len(self.updated) + len(self.moved) + len(self.removed)


@dataclass
class FolderScan:
    """The files of a synced folder (`scan_folder`), the ones left out because they are symbolic links to a file
    outside the folder (skipped, with the cause), the paths that could not be seen (rel path, POSIX, "" for the
    folder itself -> why: a folder that could not be listed, a file whose stat failed) and the folders with no
    entry at all (rel paths; the folder itself is never listed: emptied, its files were deleted)."""

    files: list[SeenFile] = field(default_factory=list)
    outside: list[FileError] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    empty: list[str] = field(default_factory=list)


def scan_folder(
    folder: Path, include: Sequence[str] = (), exclude: Sequence[str] = (), ignore: Sequence[str] = ()
) -> FolderScan:
    """The files under `folder` (absolute, resolved) as `tools.ingest.inputs.walk_folder` finds them (globs, hidden
    entries left out), with their stat; a file that vanishes while scanned is left out, and a symbolic link whose
    target is outside `folder` is skipped (a sync reads only what is inside the folder it was given, e.g. under
    `SYNC_ROOTS`). Folders that could not be listed, files whose stat failed and empty folders are listed too; files
    whose name matches an `ignore` glob are left out (unless an `include` glob matches them)."""
    scan = FolderScan()
    listing = walk_folder(folder, include, exclude, ignore)
    for path, error in listing.unlisted:
        scan.unreadable[_rel(path, folder)] = (
            f"{path}: the folder cannot be listed ({error.strerror or error}); nothing under it is removed"
        )
    scan.empty = [rel for path in listing.empty if (rel := _rel(path, folder))]  # the folder itself: files deleted
    for path in listing.files:
        if (why := name_error(path)) is not None:  # it could be neither stored nor shown: it fails alone
            scan.unreadable[_rel(path, folder)] = why
            continue
        try:
            if path.is_symlink() and not (target := path.resolve()).is_relative_to(folder):
                why = f"{path}: a symbolic link to {target}, outside the synced folder; skipped"
                scan.outside.append(FileError(str(path), "link", why))
                continue
            stat = path.stat()
        except (FileNotFoundError, RuntimeError):  # vanished, or a symbolic link loop
            continue
        except OSError as exc:
            scan.unreadable[_rel(path, folder)] = (
                f"{path}: cannot be read ({exc.strerror or exc}); its document is kept"
            )
            continue
        scan.files.append(SeenFile(path, path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns))
    return scan


def _rel(path: Path, folder: Path) -> str:
    """`path` relative to `folder` (POSIX; "" for the folder itself)."""
    rel = path.relative_to(folder).as_posix()
    return "" if rel == "." else rel


def _under(rel_path: str, folder: str) -> bool:
    """Whether `rel_path` is `folder` or lies under it ("" holds everything)."""
    return folder == "" or rel_path == folder or rel_path.startswith(folder + "/")


def settle(
    files: Sequence[SeenFile],
    settle_s: float,
    now_ns: Callable[[], int] = time.time_ns,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[SeenFile], list[SeenFile]]:
    """(settled files, files still being written): a file modified less than `settle_s` before now is looked at
    again once the newest of them is `settle_s` old (one wait per scan, at most `settle_s`); one whose size or mtime
    changed meanwhile (or that vanished) is still being written: not yet there."""
    now = now_ns()
    settle_ns = int(settle_s * 1e9)
    recent = [f for f in files if now - f.mtime_ns < settle_ns]
    if not recent:
        return list(files), []
    sleep(min(settle_s, max(0.0, (max(f.mtime_ns for f in recent) + settle_ns - now) / 1e9)))
    moving: set[str] = set()
    for file in recent:
        try:
            stat = file.path.stat()
        except OSError:
            moving.add(file.rel_path)
            continue
        if (stat.st_size, stat.st_mtime_ns) != (file.size, file.mtime_ns):
            moving.add(file.rel_path)
    return [f for f in files if f.rel_path not in moving], [f for f in files if f.rel_path in moving]


HashFn = Callable[[Path], tuple[str, Kind]]
"""A file's (sha256 hex of its bytes, sniffed type); raises OSError when it cannot be read."""


def plan_sync(
    seen: Sequence[SeenFile],
    recorded: dict[str, FileState],
    doc_id_of: Callable[[str], str],
    hash_file: HashFn,
    racy_since_ns: int | None = None,
    unreadable: Mapping[str, str] | None = None,
    empty: Sequence[str] = (),
    pending: Sequence[str] = (),
) -> SyncPlan:
    """The plan (see the module docstring) of the files `seen` against the `recorded` states (rel path -> state);
    `doc_id_of` names a rel path's document, `hash_file` reads a file (only those the stat does not settle). A file
    read whose mtime is `racy_since_ns` or later (ns since the epoch: the sync's start less `RACY_WINDOW_NS`; None:
    none is racy) is planned with the mtime `RACY_MTIME_NS`, so its recorded state makes the next sync read it.

    A recorded path not seen is removed, except under an `unreadable` path (rel path -> why: a folder that could not
    be listed, a file whose stat failed) or an `empty` folder (rel paths: no entry at all) holding recorded documents:
    those stay (`unchanged`) and the cause is a failure (`failed`, once per path). A `pending` file (rel paths: still
    being written) is not yet there: its recorded document stays. A file whose document id another file seen before
    has (one name in two Unicode spellings, NFC and NFD: ids are NFC) fails alone."""
    plan = SyncPlan(pending=list(pending))
    fresh: list[Candidate] = []
    present: set[str] = set(pending)
    named: dict[str, SeenFile] = {}
    for file in seen:
        present.add(file.rel_path)
        doc_id = doc_id_of(file.rel_path)
        if (first := named.setdefault(doc_id, file)) is not file:
            why = f"{file.path}: the same document id {doc_id!r} as {first.path} (one name in two Unicode spellings?)"
            plan.failed.append(FileError(str(file.path), "unknown", why))
            continue
        old = recorded.get(file.rel_path)
        if old is not None and (old.size, old.mtime_ns, old.doc_id) == (file.size, file.mtime_ns, doc_id):
            (plan.skipped if old.status == "skipped" else plan.unchanged).append(file.rel_path)
            continue
        try:
            file_hash, kind = hash_file(file.path)
        except OSError as exc:
            plan.failed.append(FileError(str(file.path), "unknown", f"{file.path}: cannot be read ({exc.strerror})"))
            if old is not None:  # its recorded document stays
                plan.unchanged.append(file.rel_path)
            continue
        if racy_since_ns is not None and file.mtime_ns >= racy_since_ns:
            file = replace(file, mtime_ns=RACY_MTIME_NS)
        candidate = Candidate(file, file_hash, kind, doc_id)
        if old is None:
            fresh.append(candidate)
        elif old.status == "skipped":  # re-read: its type may be synced now
            plan.updated.append((old, candidate))
        elif old.file_hash == file_hash and old.doc_id == doc_id:
            plan.touched.append(candidate.state(old.content_hash))
            plan.unchanged.append(file.rel_path)
        elif old.file_hash == file_hash and old.status == "stored":
            plan.moved.append((old, candidate))
        else:
            plan.updated.append((old, candidate))
    gone = _held_back(
        [state for rel, state in sorted(recorded.items()) if rel not in present], unreadable or {}, empty, plan
    )
    by_hash: dict[str, list[FileState]] = {}
    for state in gone:
        if state.status == "stored":
            by_hash.setdefault(state.file_hash, []).append(state)
    paired: set[str] = set()
    for candidate in fresh:
        olds = by_hash.get(candidate.file_hash)
        if olds:
            old = olds.pop(0)
            paired.add(old.rel_path)
            plan.moved.append((old, candidate))
        else:
            plan.added.append(candidate)
    plan.removed = [s for s in gone if s.rel_path not in paired]
    return plan


def _held_back(
    gone: list[FileState], unreadable: Mapping[str, str], empty: Sequence[str], plan: SyncPlan
) -> list[FileState]:
    """The states of `gone` that are really gone: those under an unreadable path or an empty folder are kept in
    `plan.unchanged`; each unreadable path and each such empty folder is a failure (`plan.failed`)."""
    gone_for_good: list[FileState] = []
    failed = dict(unreadable)
    for state in gone:
        if any(_under(state.rel_path, p) for p in unreadable):
            pass
        elif (
            state.status == "stored"
            and (where := next((p for p in empty if _under(state.rel_path, p)), None)) is not None
        ):
            held = sum(1 for s in gone if _under(s.rel_path, where) and s.status == "stored")
            failed.setdefault(
                where,
                (
                    f"{where or '.'}: an empty folder where {held} synced documents were (an unmounted mount point?); "
                    "they are kept: delete the folder itself to remove them"
                ),
            )
        else:
            gone_for_good.append(state)
            continue
        plan.unchanged.append(state.rel_path)
    plan.failed += [FileError(printable(where), "unknown", why) for where, why in failed.items()]
    return gone_for_good


@dataclass
class SyncReport:
    """What one sync did (or, with `dry_run`, would do).

    Attributes:
        added, updated, removed: document ids written or deleted.
        moved: (old doc id, new doc id) of renamed files (the document kept, its ids updated).
        unchanged: files not written (the same bytes, most not even read).
        skipped: files of a type that is not synced (unsupported, JSONL corpora), with the cause.
        failed: files that failed (unreadable, extraction failed, a chunk that cannot be embedded), with the
            cause; their stored documents are kept.
        chunks_embedded: chunk texts sent to the embedder; chunks_reused: chunks that kept a stored vector
            (their text unchanged); embed_calls: calls to the embedder.
        chunks_written: chunks of the documents written.
        pending: files still being written (paths): not yet there, read by a later sync; not a failure.
        regrouped: document ids whose groups were set again without re-embedding (a `.rag-groups` file or the
            run's default groups changed: `tools.ingest.groups`).
        wall_s: wall time, seconds.
    """

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[FileError] = field(default_factory=list)
    failed: list[FileError] = field(default_factory=list)
    chunks_embedded: int = 0
    chunks_reused: int = 0
    embed_calls: int = 0
    chunks_written: int = 0
    pending: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    dry_run: bool = False
    regrouped: list[str] = field(default_factory=list)

    @property
    def any_failed(self) -> bool:
        """Whether a file failed (the exit code of `rag sync` says so)."""
        return bool(self.failed)

    @property
    def changed(self) -> bool:
        """Whether a document was (or would be) written or deleted."""
        return bool(self.added or self.updated or self.moved or self.removed)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (`rag sync --json`, a sync job's result)."""
        return {
            "added": self.added,
            "updated": self.updated,
            "moved": [{"from": old, "to": new} for old, new in self.moved],
            "removed": self.removed,
            "unchanged": self.unchanged,
            "skipped": [{"path": e.path, "kind": e.kind, "reason": e.reason} for e in self.skipped],
            "failed": [{"path": e.path, "kind": e.kind, "reason": e.reason} for e in self.failed],
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "embed_calls": self.embed_calls,
            "chunks_written": self.chunks_written,
            "pending": self.pending,
            "wall_s": round(self.wall_s, 3),
            "dry_run": self.dry_run,
            "regrouped": self.regrouped,
        }

    def lines(self) -> list[str]:
        """The human summary: one line of counts, the embedding line, then each change and each failed or skipped
        file."""
        verb = "would be " if self.dry_run else ""
        out = [
            f"{verb}added {len(self.added)}, updated {len(self.updated)}, moved {len(self.moved)}, removed "
            f"{len(self.removed)}; {self.unchanged} unchanged, {len(self.skipped)} skipped, {len(self.failed)} failed "
            f"(files)",
        ]
        if not self.dry_run:
            total = self.chunks_embedded + self.chunks_reused
            out.append(
                f"chunks: {self.chunks_embedded} embedded ({self.embed_calls} embed calls), {self.chunks_reused} "
                f"reused of {total}; {self.chunks_written} written in {self.wall_s:.1f} s"
            )
        out += [f"  added: {d}" for d in self.added]
        out += [f"  updated: {d}" for d in self.updated]
        out += [f"  moved: {old} -> {new}" for old, new in self.moved]
        out += [f"  removed: {d}" for d in self.removed]
        out += [f"  skipped: {e.reason}" for e in self.skipped]
        out += [f"  failed: {e.reason}" for e in self.failed]
        out += [f"  not yet there: {p}: still being written; a later sync reads it" for p in self.pending]
        out += [f"  groups set: {d}" for d in self.regrouped]
        return out


def file_hash_and_kind(path: Path) -> tuple[str, Kind]:
    """`HashFn` of a real file: sha256 of its bytes (read in 1 MiB blocks) and its sniffed type."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest(), sniff(path)


def relative_id(folder: Path, root: Path, prefix: str) -> Callable[[str], str]:
    """The document id of a path relative to `folder`: `prefix` + its path relative to `root` (POSIX), in Unicode
    NFC (a name typed on one system and saved by another in NFD is one document)."""
    base = os.path.relpath(folder, root)

    def doc_id(rel_path: str) -> str:
        return unicodedata.normalize(
            "NFC", prefix + (rel_path if base == "." else f"{Path(base).as_posix()}/{rel_path}")
        )

    return doc_id
