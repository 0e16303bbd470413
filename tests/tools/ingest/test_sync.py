"""`tools.ingest.sync` against the real Postgres and the real Triton: after edits, deletions and a rename, a sync
leaves the collection equal to a fresh ingest of the folder while embedding only the changed chunks; a second run
does nothing; an interrupted sync converges when run again; documents the sync does not own are never removed."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import unicodedata
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from evals.bench_sync import (
    change_folder,
    changed_chunks,
    chunk_texts,
    collection_version,
    differences,
    snapshot,
    write_folder,
)
from tests.document_files import GUIDE_HTML, print_pdf
from tools.embedder import EmbedderError, TextKind, TritonEmbedder
from tools.extract.ocr import OcrOptions
from tools.ingest import ingest, plan_inputs
from tools.ingest.sync import CountingEmbedder, SyncRequest, sync_folder
from tools.ingest.sync_plan import file_hash_and_kind
from tools.originals import Originals
from tools.store import VectorStore
from tools.store.records import chunk_id
from tools.store.sync_state import SYNC_LOCK, FileState, PostgresSyncLedger


@pytest.fixture
async def store(fresh_db: str, embedder: TritonEmbedder) -> AsyncIterator[VectorStore]:
    async with VectorStore(fresh_db, embedder.spec.name, embedder.spec.dim) as st:
        yield st


async def fresh_ingest(folder: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings) -> None:
    """The folder ingested afresh into collection `fresh` (`rag ingest FOLDER --root FOLDER`)."""
    await ingest(plan_inputs([folder], root=folder), embedder, store, ingest_options(settings, "fresh"))


async def test_sync_converges_to_a_fresh_ingest_and_embeds_only_changed_chunks(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    folder = (tmp_path / "folder").resolve()
    names = write_folder(folder, 20)
    print_pdf(GUIDE_HTML, folder / "guide.pdf")
    names.append("guide.pdf")
    other = tmp_path / "other" / "elsewhere.md"
    other.parent.mkdir()
    other.write_text("# Elsewhere\n\nThis document was ingested by other means.\n")
    options = ingest_options(settings)
    originals = Originals(tmp_path / "originals")
    request = SyncRequest(folder, collection="synced")
    counted = CountingEmbedder(embedder)

    first = await sync_folder(request, counted, store, PostgresSyncLedger(store), options, originals=originals)
    assert (len(first.added), first.failed, first.removed) == (21, [], [])
    await ingest(plan_inputs([other], root=other.parent), embedder, store, ingest_options(settings, "synced"))

    before = {n: chunk_texts(folder / n, n, settings, counted) for n in names}
    change = change_folder(folder, names)
    after = {n: chunk_texts(folder / n, n, settings, counted) for n in change.edited}
    calls, texts = counted.calls, counted.texts
    second = await sync_folder(request, counted, store, PostgresSyncLedger(store), options, originals=originals)

    assert sorted(second.updated) == sorted(change.edited)
    assert sorted(second.removed) == sorted(change.deleted)
    assert second.moved == change.renamed
    assert (second.added, second.failed) == ([], [])
    expected = changed_chunks(before, after)
    assert 0 < expected < sum(len(t) for t in after.values())
    assert counted.texts - texts == second.chunks_embedded == expected
    assert counted.calls - calls == second.embed_calls == 1
    assert second.chunks_reused == sum(len(t) for t in after.values()) - expected

    await fresh_ingest(folder, embedder, store, settings)
    async with store.pool.acquire() as conn:
        synced = await snapshot(conn, "synced")
        fresh = await snapshot(conn, "fresh")
        version = await collection_version(conn, "synced")
    assert "elsewhere.md" in synced  # ingested by other means: never removed by the sync
    del synced["elsewhere.md"]
    assert differences(synced, fresh) == []
    old, new = change.renamed[0]
    assert synced[new]["chunk_ids"] == [chunk_id("synced", new, i) for i in range(len(synced[new]["chunks"]))]
    assert originals.find("synced", new) is not None and originals.find("synced", old) is None
    assert all(originals.find("synced", d) is None for d in change.deleted)

    third = await sync_folder(request, counted, store, PostgresSyncLedger(store), options, originals=originals)
    assert not third.changed and third.embed_calls == 0 and third.unchanged == len(synced)
    async with store.pool.acquire() as conn:
        assert await collection_version(conn, "synced") == version


class FailingEmbedder:
    """The real embedder, failing every call after the first `calls` (a crash in the middle of a sync)."""

    def __init__(self, inner: TritonEmbedder, calls: int) -> None:
        self.inner, self.left = inner, calls
        self.spec, self.tokenizer = inner.spec, inner.tokenizer

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        if self.left == 0:
            raise EmbedderError("Triton went away (injected)")
        self.left -= 1
        return await self.inner.embed(texts, kind)


async def test_an_interrupted_sync_converges_when_run_again(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    folder = (tmp_path / "folder").resolve()
    names = write_folder(folder, 8)
    options = replace(ingest_options(settings), batch_docs=2)
    request = SyncRequest(folder, collection="synced")
    await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    change_folder(folder, names)
    for i in range(3):  # new files too, embedded in batches of 2 after the changed ones
        (folder / f"new-{i}.md").write_text(f"# New {i}\n\nA new file, number {i}, about sea otters.\n")

    with pytest.raises(EmbedderError):
        await sync_folder(request, FailingEmbedder(embedder, calls=1), store, options)
    async with store.pool.acquire() as conn:
        partial = await snapshot(conn, "synced")
    resumed = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert resumed.failed == [] and resumed.changed

    await fresh_ingest(folder, embedder, store, settings)
    async with store.pool.acquire() as conn:
        synced, fresh = await snapshot(conn, "synced"), await snapshot(conn, "fresh")
    assert differences(synced, fresh) == []
    assert differences(partial, fresh) != []  # the interrupted run had not finished
    again = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert not again.changed and again.embed_calls == 0


async def test_documents_the_sync_does_not_own_are_never_removed(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """A document ingested by other means under the id of a file of the folder that has no text, or is not a synced
    type, stays when the file is synced and when the file is deleted."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("blank.md", "anim.gif"):
        (elsewhere / name).write_text(f"# {name}\n\nIngested by other means.\n")
    await ingest(plan_inputs([elsewhere], root=elsewhere), embedder, store, ingest_options(settings, "synced"))
    (folder / "blank.md").write_text("   \n\n")
    (folder / "anim.gif").write_bytes(b"GIF89a" + bytes(range(256)))  # GIF: not a synced type
    (folder / "kept.md").write_text("# Kept\n\nThe synced file.\n")
    request = SyncRequest(folder, collection="synced")
    first = await sync_folder(request, embedder, store, PostgresSyncLedger(store), ingest_options(settings))
    assert (first.added, first.removed, len(first.skipped)) == (["kept.md"], [], 1)
    for name in ("blank.md", "anim.gif", "kept.md"):
        (folder / name).unlink()
    second = await sync_folder(request, embedder, store, PostgresSyncLedger(store), ingest_options(settings))
    assert second.removed == ["kept.md"]
    assert set(await store.stored_versions(["blank.md", "anim.gif", "kept.md"], "synced")) == {"blank.md", "anim.gif"}


async def test_a_second_sync_of_the_same_folder_waits_for_the_first(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """While one sync of a folder into a collection holds its lock, another waits (its lock request is seen waiting
    in `pg_locks`), then runs once the first ends."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nHerons fish at dawn.\n")
    ledger = PostgresSyncLedger(store)
    await ledger.setup()
    async with ledger.exclusive(str(folder), "synced"):
        task = asyncio.create_task(sync_folder(SyncRequest(folder, collection="synced"), embedder, store,
                                               ingest_options(settings)))  # fmt: skip
        while not await waiting_sync_locks(store):
            assert not task.done(), task
            await asyncio.sleep(0.05)
        assert not task.done()
    report = await task
    assert report.added == ["a.md"]


async def waiting_sync_locks(store: VectorStore) -> int:
    async with store.pool.acquire() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND NOT granted", SYNC_LOCK
        )
    return count


async def test_a_move_whose_document_is_gone_leaves_the_target_alone(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """A move of a document that is no longer stored (another run moved it already) writes nothing and says so; the
    document stored under the new id stays."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "b.md").write_text("# Beta\n\nOtters float on their backs.\n")
    first = await sync_folder(SyncRequest(folder, collection="synced"), embedder, store, ingest_options(settings))
    assert first.added == ["b.md"]
    ledger = PostgresSyncLedger(store)
    source = await ledger.find_source(str(folder), "synced")
    assert source is not None
    recorded = (await ledger.files(source.id))["b.md"]
    old = replace(recorded, rel_path="a.md", doc_id="a.md")
    counts = await ledger.move(source.id, "synced", old, recorded, str(folder / "b.md"), None)
    assert counts.missing == ("a.md",)
    assert set(await store.stored_versions(["a.md", "b.md"], "synced")) == {"b.md"}


async def test_the_sync_reads_files_with_the_ocr_options(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """An image synced with OCR off fails naming the setting (the options reach the reader)."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    options = replace(ingest_options(settings), ocr=OcrOptions(enabled=False))
    report = await sync_folder(SyncRequest(folder, collection="synced"), embedder, store, options)
    assert [e.reason for e in report.failed] == [f"{folder / 'scan.png'}: an image, whose text only OCR reads, and OCR "
                                                 "is off (OCR=false); set OCR=true"]  # fmt: skip


def long_markdown(last: str) -> str:
    """A Markdown document of several chunks whose last paragraph is `last`."""
    paragraphs = [
        f"Paragraph {i} tells of the harbour's {i} cranes, the tides that lift the ships and the crews that load "
        f"them at night, of the ropes, the gulls and the long wait for the morning pilot number {i}. " * 3
        for i in range(12)
    ]
    return "# Harbour\n\n" + "\n\n".join([*paragraphs, last]) + "\n"


async def test_a_new_prefix_and_new_bytes_replace_the_old_document_lending_its_vectors(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """A file whose bytes changed while its doc id changed (another `--prefix`) leaves no document under its old id;
    its unchanged chunks keep the old document's vectors."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "a.md").write_text(long_markdown("The end."))
    options = ingest_options(settings)
    await sync_folder(SyncRequest(folder, collection="synced"), embedder, store, options)
    (folder / "a.md").write_text(long_markdown("A different end."))
    report = await sync_folder(SyncRequest(folder, collection="synced", prefix="kb/"), embedder, store, options)
    assert (report.removed, report.added, report.updated) == (["a.md"], ["kb/a.md"], [])
    assert report.chunks_reused > 0 and report.chunks_embedded < report.chunks_reused
    assert set(await store.stored_versions(["a.md", "kb/a.md"], "synced")) == {"kb/a.md"}


async def test_a_document_stored_under_a_files_id_is_taken_over(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """A document already stored under a synced file's id (`rag ingest` of the same folder earlier, or other content
    under that name) is the file's document: adopted as it is (same content, nothing embedded) or replaced, then
    kept in step with the file and removed when the file is deleted."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "same.md").write_text("# Same\n\nIngested before the folder was synced.\n")
    await ingest(plan_inputs([folder], root=folder), embedder, store, ingest_options(settings, "synced"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "other.md").write_text("# Other\n\nOther content under the same name.\n")
    await ingest(plan_inputs([elsewhere], root=elsewhere), embedder, store, ingest_options(settings, "synced"))
    (folder / "other.md").write_text("# Other\n\nThe synced file's own content.\n")
    request, options = SyncRequest(folder, collection="synced"), ingest_options(settings)

    first = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert (first.added, first.updated, first.unchanged, first.embed_calls) == (["other.md"], [], 1, 1)
    (folder / "same.md").write_text("# Same\n\nEdited after it was taken over.\n")
    second = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert second.updated == ["same.md"]
    for name in ("same.md", "other.md"):
        (folder / name).unlink()
    third = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert sorted(third.removed) == ["other.md", "same.md"]
    assert await store.stored_versions(["same.md", "other.md"], "synced") == {}


async def test_a_synced_document_deleted_by_hand_comes_back_with_the_next_sync(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """Deleting a synced document (`rag docs delete`, `DELETE /v1/documents`) deletes its file's sync state with it:
    the next sync, though the file's stat is unchanged, adds it again."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nHerons fish at dawn.\n")
    (folder / "b.md").write_text("# Beta\n\nOtters float on their backs.\n")
    request, options = SyncRequest(folder, collection="synced"), ingest_options(settings)
    await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert await store.delete_documents(["a.md"], collections=["synced"]) == ["a.md"]
    again = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert (again.added, again.unchanged) == (["a.md"], 1)
    assert set(await store.stored_versions(["a.md", "b.md"], "synced")) == {"a.md", "b.md"}


async def test_a_renamed_file_without_text_removes_its_document_and_reports_it(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """A stored file renamed (the same bytes) whose new path reads as no text: its document is removed, and reported
    removed. (The recorded state is written by hand: the same bytes read the same, short of a reader change.)"""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    blank = folder / "new.md"
    blank.write_text("   \n\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gone.md").write_text("# Gone\n\nThe document the file had.\n")
    await ingest(plan_inputs([elsewhere], root=elsewhere), embedder, store, ingest_options(settings, "synced"))
    ledger = PostgresSyncLedger(store)
    await ledger.setup()
    source_id = await ledger.open_source(str(folder), "synced", str(folder), "", (), ())
    digest, _ = file_hash_and_kind(blank)
    await ledger.touch(source_id, FileState("gone.md", 5, 1, digest, "gone.md", "c", "stored"))
    report = await sync_folder(SyncRequest(folder, collection="synced"), embedder, store, ingest_options(settings))
    assert (report.removed, report.moved, report.added) == (["gone.md"], [], [])
    assert await store.stored_versions(["gone.md", "new.md"], "synced") == {}


async def test_a_renamed_pdf_is_moved_without_being_read_again(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """A PDF's content depends on its bytes alone: renamed, it is moved as it is, not extracted again (the second run
    reads files of at most 10 bytes, so a read would fail)."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    print_pdf(GUIDE_HTML, folder / "guide.pdf")
    request, options = SyncRequest(folder, collection="synced"), ingest_options(settings)
    assert (await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)).added == ["guide.pdf"]
    (folder / "guide.pdf").rename(folder / "manual.pdf")
    report = await sync_folder(request, embedder, store, PostgresSyncLedger(store), replace(options, max_file_bytes=10))
    assert (report.moved, report.failed, report.embed_calls) == ([("guide.pdf", "manual.pdf")], [], 0)
    assert set(await store.stored_versions(["guide.pdf", "manual.pdf"], "synced")) == {"manual.pdf"}


async def test_a_folder_that_cannot_be_listed_removes_nothing(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A synced subfolder whose listing fails (`chmod 000` for a user other than root; the tests run as root, so the
    failure is injected into `os.scandir`, which `os.walk` lists folders with) fails the sync and removes none of
    its documents, in a dry run too; a subfolder emptied (an unmounted mount point) keeps its documents too."""
    folder = (tmp_path / "folder").resolve()
    for rel in ["a.md", "locked/b.md", "mount/c.md"]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"# {rel}\n\nHerons and otters share the river {rel}.\n")
    request = SyncRequest(folder, collection="synced")
    first = await sync_folder(request, embedder, store, PostgresSyncLedger(store), ingest_options(settings))
    assert sorted(first.added) == ["a.md", "locked/b.md", "mount/c.md"]
    (folder / "mount" / "c.md").unlink()
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == folder / "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    for dry_run in (True, False):
        report = await sync_folder(request, embedder, store, PostgresSyncLedger(store), ingest_options(settings), dry_run=dry_run)
        assert report.removed == [] and report.any_failed
        assert [e.reason.split(":")[0] for e in report.failed] == [str(folder / "locked"), "mount"]
    stored = await store.stored_versions(["a.md", "locked/b.md", "mount/c.md"], "synced")
    assert sorted(stored) == ["a.md", "locked/b.md", "mount/c.md"]


async def test_editor_files_are_left_out_and_a_file_being_written_waits(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """Backups, lock files and partial downloads are neither stored nor failures; a file still being written (a
    writer appending every 0.1 s) is not yet there, no failure, and is stored whole by the sync after it is done;
    a name saved in NFD is stored under its NFC id."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nHerons fish at dawn.\n")
    for name in ("notes.md~", "#notes.md#", "film.mp4.part"):
        (folder / name).write_text("# Backup\n\nAn older copy.\n")
    (folder / "~$report.docx").write_bytes(b"\x05me    " + bytes(154))  # Word's lock file: not a DOCX
    nfd = unicodedata.normalize("NFD", "café.md")
    (folder / nfd).write_text("# Café\n\nOtters float on their backs.\n")
    growing = folder / "growing.md"
    growing.write_text("# Growing\n\n")
    done = threading.Event()

    def write() -> None:
        for i in range(25):
            with growing.open("a") as handle:
                handle.write(f"Line {i} of a long download about sea otters.\n")
            time.sleep(0.1)
        done.set()

    options = replace(ingest_options(settings), settle_s=1.0)
    request = SyncRequest(folder, collection="synced")
    writer = threading.Thread(target=write)
    writer.start()
    try:
        first = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    finally:
        await asyncio.to_thread(writer.join)
    assert not first.any_failed and first.skipped == [], first.failed
    assert sorted(first.added) == sorted(["notes.md", unicodedata.normalize("NFC", "café.md")])
    assert first.pending == [str(growing)]
    second = await sync_folder(request, embedder, store, PostgresSyncLedger(store), options)
    assert (second.added, second.failed, second.pending) == (["growing.md"], [], [])
    async with store.pool.acquire() as conn:
        text = await conn.fetchval(
            "SELECT string_agg(text, ' ') FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.doc_id = 'growing.md' AND d.collection = 'synced'"
        )
    assert "Line 24 of a long download" in text
