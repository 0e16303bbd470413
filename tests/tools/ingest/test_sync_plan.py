"""The sync plan (`tools.ingest.sync_plan`) from a folder's files and the recorded state, with no store: the stat
fast path reads nothing, the same bytes under a new stat only touch the state, a path gone with its bytes under a
new path is a move, an unreadable file keeps its document, and the report's summary lines."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from tools.extract import Kind
from tools.ingest.inputs import TEMPORARY_NAMES, plan_inputs
from tools.ingest.report import FileError
from tools.ingest.sync_plan import (
    RACY_MTIME_NS,
    SeenFile,
    SyncReport,
    plan_sync,
    relative_id,
    scan_folder,
    settle,
)
from tools.records import FileState


def seen(rel: str, size: int = 10, mtime: int = 1) -> SeenFile:
    return SeenFile(Path("/f") / rel, rel, size, mtime)


def state(rel: str, digest: str, size: int = 10, mtime: int = 1, doc_id: str | None = None) -> FileState:
    return FileState(rel, size, mtime, digest, doc_id or rel, "c-" + digest)


class Hashes:
    """A fake `HashFn` over a dict of rel path -> bytes hash, recording what was read."""

    def __init__(self, digests: dict[str, str], unreadable: frozenset[str] = frozenset()) -> None:
        self.digests, self.unreadable, self.read = digests, unreadable, []  # type: ignore[var-annotated]

    def __call__(self, path: Path) -> tuple[str, Kind]:
        rel = path.relative_to("/f").as_posix()
        self.read.append(rel)
        if rel in self.unreadable:
            raise PermissionError(13, "Permission denied")
        return self.digests[rel], "markdown"


def test_unchanged_stat_reads_nothing() -> None:
    hashes = Hashes({})
    plan = plan_sync([seen("a.md"), seen("b/c.md")], {"a.md": state("a.md", "h1"), "b/c.md": state("b/c.md", "h2")},
                     str, hashes)  # fmt: skip
    assert plan.unchanged == ["a.md", "b/c.md"] and plan.changes == 0 and hashes.read == []


def test_new_stat_with_the_same_bytes_only_touches_the_state() -> None:
    plan = plan_sync([seen("a.md", mtime=2)], {"a.md": state("a.md", "h1")}, str, Hashes({"a.md": "h1"}))
    assert plan.changes == 0 and [t.mtime_ns for t in plan.touched] == [2] and plan.touched[0].content_hash == "c-h1"


def test_changed_new_gone_and_renamed_files() -> None:
    recorded = {r: state(r, h) for r, h in [("edit.md", "e1"), ("gone.md", "g"), ("old/name.md", "m")]}
    files = [seen("edit.md", size=11), seen("new.md"), seen("moved/name.md")]
    plan = plan_sync(files, recorded, str, Hashes({"edit.md": "e2", "new.md": "n", "moved/name.md": "m"}))
    assert [(old.rel_path, c.doc_id) for old, c in plan.updated] == [("edit.md", "edit.md")]
    assert [c.doc_id for c in plan.added] == ["new.md"]
    assert [(old.doc_id, c.doc_id) for old, c in plan.moved] == [("old/name.md", "moved/name.md")]
    assert [s.rel_path for s in plan.removed] == ["gone.md"]


def test_a_new_document_id_for_the_same_bytes_is_a_move() -> None:
    plan = plan_sync([seen("a.md")], {"a.md": state("a.md", "h1")}, lambda rel: "docs/" + rel, Hashes({"a.md": "h1"}))
    assert [(old.doc_id, c.doc_id) for old, c in plan.moved] == [("a.md", "docs/a.md")]


def test_an_unreadable_file_fails_alone_and_keeps_its_document() -> None:
    recorded = {"a.md": state("a.md", "h1")}
    plan = plan_sync([seen("a.md", mtime=5), seen("b.md")], recorded, str,
                     Hashes({"b.md": "h2"}, unreadable=frozenset({"a.md"})))  # fmt: skip
    assert plan.removed == [] and [c.doc_id for c in plan.added] == ["b.md"]
    assert [e.reason for e in plan.failed] == ["/f/a.md: cannot be read (Permission denied)"]


def test_two_copies_of_one_deleted_file_move_one_and_add_the_other() -> None:
    copies = Hashes({"x.md": "h", "y.md": "h"})
    plan = plan_sync([seen("x.md"), seen("y.md")], {"a.md": state("a.md", "h")}, str, copies)
    assert [(old.rel_path, c.seen.rel_path) for old, c in plan.moved] == [("a.md", "x.md")]
    assert [c.doc_id for c in plan.added] == ["y.md"] and plan.removed == []


def test_document_ids_are_relative_to_the_root_with_the_prefix(tmp_path: Path) -> None:
    assert relative_id(tmp_path / "docs" / "guide", tmp_path / "docs", "kb/")("a/b.md") == "kb/guide/a/b.md"
    assert relative_id(tmp_path, tmp_path, "")("b.md") == "b.md"


def test_scan_follows_the_globs_and_leaves_out_hidden_entries(tmp_path: Path) -> None:
    for rel in ["a.md", "drafts/b.md", ".hidden/c.md", "d.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert [f.rel_path for f in scan_folder(tmp_path, exclude=["drafts/*"]).files] == ["a.md", "d.txt"]
    assert [f.rel_path for f in scan_folder(tmp_path, include=["*.md"]).files] == ["a.md", "drafts/b.md"]


def test_scan_skips_symbolic_links_to_files_outside_the_folder(tmp_path: Path) -> None:
    folder, outside = tmp_path / "folder", tmp_path / "secret.txt"
    folder.mkdir()
    outside.write_text("not to be synced")
    (folder / "a.md").write_text("inside")
    (folder / "leak.txt").symlink_to(outside)
    (folder / "alias.md").symlink_to(folder / "a.md")
    scan = scan_folder(folder.resolve())
    assert [f.rel_path for f in scan.files] == ["a.md", "alias.md"]
    assert [e.reason for e in scan.outside] == [
        f"{folder.resolve() / 'leak.txt'}: a symbolic link to {outside.resolve()}, outside the synced folder; skipped"
    ]


def test_the_report_says_what_changed_and_what_was_embedded() -> None:
    report = SyncReport(added=["n.md"], moved=[("a.md", "b.md")], unchanged=4, chunks_embedded=2, chunks_reused=5,
                        embed_calls=1, failed=[FileError("/f/x.pdf", "pdf", "/f/x.pdf: encrypted")])  # fmt: skip
    lines = report.lines()
    assert lines[0] == "added 1, updated 0, moved 1, removed 0; 4 unchanged, 0 skipped, 1 failed (files)"
    assert lines[1].startswith("chunks: 2 embedded (1 embed calls), 5 reused of 7")
    assert "  moved: a.md -> b.md" in lines and "  failed: /f/x.pdf: encrypted" in lines
    assert report.to_json()["moved"] == [{"from": "a.md", "to": "b.md"}] and report.any_failed


def test_a_file_recorded_as_skipped_is_not_read_again_until_it_changes() -> None:
    recorded = {"p.png": FileState("p.png", 10, 1, "h", "p.png", None, "skipped")}
    hashes = Hashes({"p.png": "h2"})
    plan = plan_sync([seen("p.png")], recorded, str, hashes)
    assert (plan.skipped, plan.unchanged, hashes.read) == (["p.png"], [], [])
    changed = plan_sync([seen("p.png", mtime=2)], recorded, str, hashes)
    assert [old.status for old, _ in changed.updated] == ["skipped"] and hashes.read == ["p.png"]


def test_a_file_modified_just_before_the_sync_is_recorded_to_be_read_again() -> None:
    """A racy file (modified within the window before the sync's start) is recorded with a sentinel mtime: the next
    sync hashes it again even with its stat unchanged, then records its real stat."""
    hashes = Hashes({"a.md": "h1", "b.md": "h2"})
    first = plan_sync([seen("a.md", mtime=100), seen("b.md", mtime=10)], {}, str, hashes, racy_since_ns=50)
    states = {c.seen.rel_path: c.state("c") for c in first.added}
    assert (states["a.md"].mtime_ns, states["b.md"].mtime_ns) == (RACY_MTIME_NS, 10)
    second = plan_sync([seen("a.md", mtime=100), seen("b.md", mtime=10)], states, str, hashes, racy_since_ns=500)
    assert hashes.read == ["a.md", "b.md", "a.md"] and second.changes == 0
    assert [(t.rel_path, t.mtime_ns) for t in second.touched] == [("a.md", 100)]
    assert second.unchanged == ["a.md", "b.md"]


def by_name(path: Path) -> tuple[str, Kind]:
    """A `HashFn` over real files: the file's name as its hash."""
    return path.name, "markdown"


def test_a_folder_that_cannot_be_listed_keeps_its_documents_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subfolder whose listing fails (what `chmod 000` gives a user other than root; the tests run as root, whom
    it does not stop, so the failure is injected into `os.scandir`, which `os.walk` lists folders with) is reported,
    and the recorded files under it are kept, not removed; a file really gone beside it is removed."""
    folder = tmp_path.resolve()
    for rel in ["a.md", "locked/b.md", "locked/deep/c.md"]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(rel)
    locked = folder / "locked"
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    scan = scan_folder(folder)
    assert [f.rel_path for f in scan.files] == ["a.md"]
    assert list(scan.unreadable) == ["locked"]
    recorded = {r: state(r, r.split("/")[-1]) for r in ["a.md", "gone.md", "locked/b.md", "locked/deep/c.md"]}
    plan = plan_sync(scan.files, recorded, str, by_name, unreadable=scan.unreadable, empty=scan.empty)
    assert [s.rel_path for s in plan.removed] == ["gone.md"]
    assert sorted(plan.unchanged) == ["a.md", "locked/b.md", "locked/deep/c.md"]
    assert [e.reason for e in plan.failed] == [
        f"{locked}: the folder cannot be listed (Permission denied); nothing under it is removed"
    ]


def test_an_empty_folder_that_held_documents_keeps_them_and_fails(tmp_path: Path) -> None:
    """A folder with no entry at all where synced documents were (an unmounted mount point) removes nothing; a
    folder deleted outright removes its documents."""
    folder = tmp_path.resolve()
    (folder / "mount").mkdir()
    (folder / "a.md").write_text("a")
    scan = scan_folder(folder)
    assert scan.empty == ["mount"]
    recorded = {r: state(r, r.split("/")[-1]) for r in ["a.md", "mount/x.md", "mount/y/z.md", "deleted/w.md"]}
    plan = plan_sync(scan.files, recorded, str, by_name, unreadable=scan.unreadable, empty=scan.empty)
    assert [s.rel_path for s in plan.removed] == ["deleted/w.md"]
    assert [e.reason for e in plan.failed] == [
        "mount: an empty folder where 2 synced documents were (an unmounted mount point?); they are kept: delete "
        "the folder itself to remove them"
    ]
    for path in [folder / "a.md", folder / "mount"]:  # the synced folder emptied: its files were deleted
        path.unlink() if path.is_file() else path.rmdir()
    assert scan_folder(folder).empty == []


def test_a_file_whose_stat_fails_keeps_its_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path.resolve()
    (folder / "a.md").write_text("a")
    real_stat = Path.stat

    def stat(self: Path, **kwargs: Any) -> Any:
        if self.name == "a.md":
            raise OSError(5, "Input/output error")
        return real_stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    scan = scan_folder(folder)
    plan = plan_sync(scan.files, {"a.md": state("a.md", "h")}, str, by_name, unreadable=scan.unreadable)
    assert plan.removed == [] and plan.unchanged == ["a.md"]
    assert [e.reason for e in plan.failed] == [
        f"{folder / 'a.md'}: cannot be read (Input/output error); its document is kept"
    ]


def test_editor_backups_lock_files_and_partial_downloads_are_left_out(tmp_path: Path) -> None:
    names = ["notes.md", "notes.md~", "#notes.md#", "~$report.docx", "film.mp4.part", "a.pdf.crdownload", "x.tmp"]
    for name in names:
        (tmp_path / name).write_text(name)
    scan = scan_folder(tmp_path.resolve(), ignore=TEMPORARY_NAMES)
    assert [f.rel_path for f in scan.files] == ["notes.md"]
    kept = scan_folder(tmp_path.resolve(), include=["*.md", "*.tmp"], ignore=TEMPORARY_NAMES)
    assert [f.rel_path for f in kept.files] == ["notes.md", "x.tmp"]  # an --include glob overrides
    assert len(scan_folder(tmp_path.resolve()).files) == len(names)  # no ignore: every file


def test_a_file_still_being_written_is_not_yet_there(tmp_path: Path) -> None:
    """Files modified within the settle interval are looked at again after one wait: one whose size changed
    meanwhile is not yet there (its recorded document kept, no failure); a steady one and an old one are read."""
    folder = tmp_path.resolve()
    for name in ("old.md", "steady.md", "growing.md"):
        (folder / name).write_text("first half")
    os.utime(folder / "old.md", ns=(0, 0))
    files = scan_folder(folder).files
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        with (folder / "growing.md").open("a") as handle:
            handle.write(" and the second half")

    settled, moving = settle(files, 2.0, sleep=sleep)
    assert [f.rel_path for f in settled] == ["old.md", "steady.md"] and [f.rel_path for f in moving] == ["growing.md"]
    assert len(waits) == 1 and 0 < waits[0] <= 2.0
    recorded = {"growing.md": state("growing.md", "g")}
    plan = plan_sync(settled, recorded, str, by_name, pending=["growing.md"])
    assert (plan.removed, plan.failed, plan.pending) == ([], [], ["growing.md"])
    assert settle(files, 0.0, sleep=sleep) == (files, []) and len(waits) == 1  # 0: no wait


def test_nfc_and_nfd_spellings_of_one_name_are_one_document(tmp_path: Path) -> None:
    nfc, nfd = unicodedata.normalize("NFC", "café.md"), unicodedata.normalize("NFD", "café.md")
    assert nfc != nfd and relative_id(tmp_path, tmp_path, "")(nfd) == nfc
    files = [seen(nfc), seen(nfd)]
    plan = plan_sync(files, {}, relative_id(Path("/f"), Path("/f"), ""), Hashes({nfc: "a", nfd: "b"}))
    assert [c.doc_id for c in plan.added] == [nfc]
    assert [e.reason for e in plan.failed] == [
        f"/f/{nfd}: the same document id {nfc!r} as /f/{nfc} (one name in two Unicode spellings?)"
    ]
    recorded = {nfd: state(nfd, "a", doc_id=nfd)}  # stored under its NFD spelling before ids were NFC
    moved = plan_sync([seen(nfd)], recorded, relative_id(Path("/f"), Path("/f"), ""), Hashes({nfd: "a"}))
    assert [(old.doc_id, c.doc_id) for old, c in moved.moved] == [(nfd, nfc)]
    (tmp_path / nfd).write_text("# Café\n")
    assert [i.doc_id for i in plan_inputs([tmp_path / nfd], root=tmp_path)] == [nfc]  # `rag ingest` too
