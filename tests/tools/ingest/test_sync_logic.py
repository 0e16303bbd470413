"""`tools.ingest.sync`'s own logic over the in-memory doubles (fast tier, no server): the sink, the sync ledger and
the kept originals held in memory, a scripted embedder. After edits, deletions and a rename a sync leaves the
collection equal to a fresh ingest of the folder while embedding only the changed chunks; a second run does nothing;
an interrupted sync converges when run again; documents the sync does not own are never removed; moves, new ids,
adoption, unreadable folders, editor files and files still being written. What only Postgres and Triton show (one
sync of a folder at a time across connections, a document deleted by hand taking its sync state with it, the whole
run over the real servers) stays in `test_sync.py`."""

from __future__ import annotations

import asyncio
import os
import unicodedata
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from evals.bench_sync import change_folder, chunk_texts, differences, write_folder
from tests.document_files import GUIDE_HTML, print_pdf
from tests.ingest_doubles import ScriptedEmbedder, sink_snapshot
from tests.sync_scenario import check_second_sync, make_folder
from tools.errors import EmbedderError
from tools.extract.ocr import OcrOptions
from tools.in_memory_originals import InMemoryOriginals
from tools.in_memory_sink import InMemorySink
from tools.in_memory_sync import InMemorySyncLedger
from tools.ingest import IngestOptions, ingest, plan_inputs, sync_plan
from tools.ingest import sync as sync_module
from tools.ingest.ports import DocumentEmbedder
from tools.ingest.sync import CountingEmbedder, SyncRequest, sync_folder
from tools.ingest.sync_plan import SeenFile, SyncReport, file_hash_and_kind
from tools.records import FileState, chunk_id


class Doubles:
    """The sink, ledger and originals of one test, and a sync over them."""

    def __init__(self, embedder: ScriptedEmbedder) -> None:
        self.embedder = embedder
        self.sink = InMemorySink(embedder.spec.dim)
        self.ledger = InMemorySyncLedger(self.sink)
        self.originals = InMemoryOriginals()

    async def sync(
        self, request: SyncRequest, options: IngestOptions, embedder: DocumentEmbedder | None = None, **kw: Any
    ) -> SyncReport:
        """`sync_folder` of `request` over the doubles (the scripted embedder unless `embedder`)."""
        return await sync_folder(
            request, embedder or self.embedder, self.sink, self.ledger, options, originals=self.originals, **kw
        )

    async def ingest(self, folder: Path, options: IngestOptions) -> None:
        """`rag ingest FOLDER --root FOLDER` into `options.collection`."""
        await ingest(plan_inputs([folder], root=folder), self.embedder, self.sink, options)

    async def stored(self, *doc_ids: str) -> set[str]:
        """Those of `doc_ids` stored in collection `synced`."""
        return set(await self.sink.stored_versions(list(doc_ids), "synced"))


@pytest.fixture
def doubles() -> Doubles:
    return Doubles(ScriptedEmbedder())


async def test_sync_converges_to_a_fresh_ingest_and_embeds_only_changed_chunks(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    folder, names, other = make_folder(tmp_path)
    options = ingest_options(settings)
    request = SyncRequest(folder, collection="synced")
    counted = CountingEmbedder(doubles.embedder)

    first = await doubles.sync(request, options, counted)
    assert (len(first.added), first.failed, first.removed) == (21, [], [])
    await doubles.ingest(other.parent, ingest_options(settings, "synced"))

    before = {n: chunk_texts(folder / n, n, settings, counted) for n in names}
    change = change_folder(folder, names)
    after = {n: chunk_texts(folder / n, n, settings, counted) for n in change.edited}
    embedded_before = counted.calls, counted.texts
    second = await doubles.sync(request, options, counted)
    check_second_sync(second, change, before, after, counted, embedded_before)

    await doubles.ingest(folder, ingest_options(settings, "fresh"))
    synced, fresh = sink_snapshot(doubles.sink, "synced"), sink_snapshot(doubles.sink, "fresh")
    assert "elsewhere.md" in synced  # ingested by other means: never removed by the sync
    del synced["elsewhere.md"]
    assert differences(synced, fresh) == []
    old, new = change.renamed[0]
    assert synced[new]["chunk_ids"] == [chunk_id("synced", new, i) for i in range(len(synced[new]["chunks"]))]
    originals = doubles.originals
    assert originals.read("synced", new) == (folder / new).read_bytes() and originals.read("synced", old) is None
    assert all(originals.read("synced", d) is None for d in change.deleted)
    assert originals.read("synced", "guide.pdf") == (folder / "guide.pdf").read_bytes()

    writes = doubles.sink.transactions
    third = await doubles.sync(request, options, counted)
    assert not third.changed and third.embed_calls == 0 and third.unchanged == len(synced)
    assert doubles.sink.transactions == writes  # nothing written


async def test_an_interrupted_sync_converges_when_run_again(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    folder = (tmp_path / "folder").resolve()
    names = write_folder(folder, 8)
    options = replace(ingest_options(settings), batch_docs=2)
    request = SyncRequest(folder, collection="synced")
    await doubles.sync(request, options)
    change_folder(folder, names)
    for i in range(3):  # new files too, embedded in batches of 2 after the changed ones
        (folder / f"new-{i}.md").write_text(f"# New {i}\n\nA new file, number {i}, about sea otters.\n")

    doubles.embedder.fail_with, doubles.embedder.fail_after = EmbedderError("Triton went away (injected)"), 1
    with pytest.raises(EmbedderError):
        await doubles.sync(request, options)
    partial = sink_snapshot(doubles.sink, "synced")
    doubles.embedder.fail_with = None
    resumed = await doubles.sync(request, options)
    assert resumed.failed == [] and resumed.changed

    await doubles.ingest(folder, ingest_options(settings, "fresh"))
    synced, fresh = sink_snapshot(doubles.sink, "synced"), sink_snapshot(doubles.sink, "fresh")
    assert differences(synced, fresh) == []
    assert differences(partial, fresh) != []  # the interrupted run had not finished
    again = await doubles.sync(request, options)
    assert not again.changed and again.embed_calls == 0


async def test_documents_the_sync_does_not_own_are_never_removed(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    """A document ingested by other means under the id of a file of the folder that has no text, or is not a synced
    type, stays when the file is synced and when the file is deleted."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("blank.md", "anim.gif"):
        (elsewhere / name).write_text(f"# {name}\n\nIngested by other means.\n")
    await doubles.ingest(elsewhere, ingest_options(settings, "synced"))
    (folder / "blank.md").write_text("   \n\n")
    (folder / "anim.gif").write_bytes(b"GIF89a" + bytes(range(256)))  # GIF: not a synced type
    (folder / "kept.md").write_text("# Kept\n\nThe synced file.\n")
    request = SyncRequest(folder, collection="synced")
    first = await doubles.sync(request, ingest_options(settings))
    assert (first.added, first.removed, len(first.skipped)) == (["kept.md"], [], 1)
    for name in ("blank.md", "anim.gif", "kept.md"):
        (folder / name).unlink()
    second = await doubles.sync(request, ingest_options(settings))
    assert second.removed == ["kept.md"]
    assert await doubles.stored("blank.md", "anim.gif", "kept.md") == {"blank.md", "anim.gif"}


async def test_the_sync_reads_files_with_the_ocr_options(tmp_path: Path, doubles: Doubles, settings: Settings) -> None:
    """An image synced with OCR off fails naming the setting (the options reach the reader)."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    options = replace(ingest_options(settings), ocr=OcrOptions(enabled=False))
    report = await doubles.sync(SyncRequest(folder, collection="synced"), options)
    assert [e.reason for e in report.failed] == [
        f"{folder / 'scan.png'}: an image, whose text only OCR reads, and OCR is off (OCR=false); set OCR=true"
    ]


def long_markdown(last: str) -> str:
    """A Markdown document of several chunks whose last paragraph is `last`."""
    paragraphs = [
        f"Paragraph {i} tells of the harbour's {i} cranes, the tides that lift the ships and the crews that load "
        f"them at night, of the ropes, the gulls and the long wait for the morning pilot number {i}. " * 3
        for i in range(12)
    ]
    return "# Harbour\n\n" + "\n\n".join([*paragraphs, last]) + "\n"


async def test_a_new_prefix_and_new_bytes_replace_the_old_document_lending_its_vectors(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    """A file whose bytes changed while its doc id changed (another `--prefix`) leaves no document under its old id;
    its unchanged chunks keep the old document's vectors."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "a.md").write_text(long_markdown("The end."))
    options = ingest_options(settings)
    await doubles.sync(SyncRequest(folder, collection="synced"), options)
    (folder / "a.md").write_text(long_markdown("A different end."))
    report = await doubles.sync(SyncRequest(folder, collection="synced", prefix="kb/"), options)
    assert (report.removed, report.added, report.updated) == (["a.md"], ["kb/a.md"], [])
    assert report.chunks_reused > 0 and report.chunks_embedded < report.chunks_reused
    assert await doubles.stored("a.md", "kb/a.md") == {"kb/a.md"}
    assert doubles.originals.read("synced", "a.md") is None and doubles.originals.read("synced", "kb/a.md")


async def test_a_document_stored_under_a_files_id_is_taken_over(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    """A document already stored under a synced file's id (`rag ingest` of the same folder earlier, or other content
    under that name) is the file's document: adopted as it is (same content, nothing embedded) or replaced, then
    kept in step with the file and removed when the file is deleted."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "same.md").write_text("# Same\n\nIngested before the folder was synced.\n")
    await doubles.ingest(folder, ingest_options(settings, "synced"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "other.md").write_text("# Other\n\nOther content under the same name.\n")
    await doubles.ingest(elsewhere, ingest_options(settings, "synced"))
    (folder / "other.md").write_text("# Other\n\nThe synced file's own content.\n")
    request, options = SyncRequest(folder, collection="synced"), ingest_options(settings)

    first = await doubles.sync(request, options)
    assert (first.added, first.updated, first.unchanged, first.embed_calls) == (["other.md"], [], 1, 1)
    (folder / "same.md").write_text("# Same\n\nEdited after it was taken over.\n")
    second = await doubles.sync(request, options)
    assert second.updated == ["same.md"]
    for name in ("same.md", "other.md"):
        (folder / name).unlink()
    third = await doubles.sync(request, options)
    assert sorted(third.removed) == ["other.md", "same.md"]
    assert await doubles.stored("same.md", "other.md") == set()
    assert doubles.originals.kept == {}


async def test_a_renamed_file_without_text_removes_its_document_and_reports_it(
    tmp_path: Path, doubles: Doubles, settings: Settings
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
    await doubles.ingest(elsewhere, ingest_options(settings, "synced"))
    ledger = doubles.ledger
    source_id = await ledger.open_source(str(folder), "synced", str(folder), "", (), ())
    digest, _ = file_hash_and_kind(blank)
    await ledger.touch(source_id, FileState("gone.md", 5, 1, digest, "gone.md", "c", "stored"))
    report = await doubles.sync(SyncRequest(folder, collection="synced"), ingest_options(settings))
    assert (report.removed, report.moved, report.added) == (["gone.md"], [], [])
    assert await doubles.stored("gone.md", "new.md") == set()


async def test_a_renamed_pdf_is_moved_without_being_read_again(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    """A PDF's content depends on its bytes alone: renamed, it is moved as it is, not extracted again (the second run
    reads files of at most 10 bytes, so a read would fail)."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    print_pdf(GUIDE_HTML, folder / "guide.pdf")
    request, options = SyncRequest(folder, collection="synced"), ingest_options(settings)
    assert (await doubles.sync(request, options)).added == ["guide.pdf"]
    (folder / "guide.pdf").rename(folder / "manual.pdf")
    report = await doubles.sync(request, replace(options, max_file_bytes=10))
    assert (report.moved, report.failed, report.embed_calls) == ([("guide.pdf", "manual.pdf")], [], 0)
    assert await doubles.stored("guide.pdf", "manual.pdf") == {"manual.pdf"}
    assert doubles.originals.read("synced", "manual.pdf") == (folder / "manual.pdf").read_bytes()


async def test_a_folder_that_cannot_be_listed_removes_nothing(
    tmp_path: Path, doubles: Doubles, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A synced subfolder whose listing fails (`chmod 000` for a user other than root; the tests run as root, so the
    failure is injected into `os.scandir`, which `os.walk` lists folders with) fails the sync and removes none of
    its documents, in a dry run too; a subfolder emptied (an unmounted mount point) keeps its documents too."""
    folder = (tmp_path / "folder").resolve()
    for rel in ["a.md", "locked/b.md", "mount/c.md"]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"# {rel}\n\nHerons and otters share the river {rel}.\n")
    request = SyncRequest(folder, collection="synced")
    first = await doubles.sync(request, ingest_options(settings))
    assert sorted(first.added) == ["a.md", "locked/b.md", "mount/c.md"]
    (folder / "mount" / "c.md").unlink()
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == folder / "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    for dry_run in (True, False):
        report = await doubles.sync(request, ingest_options(settings), dry_run=dry_run)
        assert report.removed == [] and report.any_failed
        assert [e.reason.split(":")[0] for e in report.failed] == [str(folder / "locked"), "mount"]
    assert await doubles.stored("a.md", "locked/b.md", "mount/c.md") == {"a.md", "locked/b.md", "mount/c.md"}


async def test_editor_files_are_left_out_and_a_file_being_written_waits(
    tmp_path: Path, doubles: Doubles, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backups, lock files and partial downloads are neither stored nor failures; a file still being written (a line
    appended while the sync waits for it to settle) is not yet there, no failure, and is stored whole by the sync
    after it is done; a name saved in NFD is stored under its NFC id. The writer appends inside the settle wait
    itself, so no thread races the clock."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nHerons fish at dawn.\n")
    for name in ("notes.md~", "#notes.md#", "film.mp4.part"):
        (folder / name).write_text("# Backup\n\nAn older copy.\n")
    (folder / "~$report.docx").write_bytes(b"\x05me    " + bytes(154))  # Word's lock file: not a DOCX
    nfd = unicodedata.normalize("NFD", "café.md")
    (folder / nfd).write_text("# Café\n\nOtters float on their backs.\n")
    growing = folder / "growing.md"
    growing.write_text("# Growing\n\n" + "".join(f"Line {i} of a long download about sea otters.\n" for i in range(24)))
    writing = True
    waits: list[float] = []
    real_settle = sync_plan.settle

    def settle_while_writing(files: Sequence[SeenFile], settle_s: float) -> tuple[list[SeenFile], list[SeenFile]]:
        def sleep(seconds: float) -> None:  # the wait for recent files to settle: the download goes on meanwhile
            waits.append(seconds)
            if writing:
                with growing.open("a") as handle:
                    handle.write("Line 24 of a long download about sea otters.\n")

        return real_settle(files, settle_s, sleep=sleep)

    monkeypatch.setattr(sync_module, "settle", settle_while_writing)
    options = replace(ingest_options(settings), settle_s=60.0)  # every file is recent: each sync waits once
    request = SyncRequest(folder, collection="synced")
    first = await doubles.sync(request, options)
    assert len(waits) == 1
    assert not first.any_failed and first.skipped == [], first.failed
    assert sorted(first.added) == sorted(["notes.md", unicodedata.normalize("NFC", "café.md")])
    assert first.pending == [str(growing)]
    writing = False  # the download is done
    second = await doubles.sync(request, options)
    assert (second.added, second.failed, second.pending) == (["growing.md"], [], [])
    text = " ".join(c.text for c in doubles.sink.documents["synced", "growing.md"].chunks)
    assert "Line 24 of a long download" in text


async def test_a_sync_holds_its_sources_lock_and_a_dry_run_takes_none(
    tmp_path: Path, doubles: Doubles, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync asks for the lock of its folder's source and waits while another holder has it (nothing written), then
    runs once it is released; a dry run meanwhile takes no lock and ends at once."""
    folder = (tmp_path / "folder").resolve()
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nHerons fish at dawn.\n")
    request, options = SyncRequest(folder, collection="synced"), replace(ingest_options(settings), settle_s=0.0)
    ledger = doubles.ledger
    async with ledger.exclusive(str(folder), "synced"):
        held = ledger.exclusive
        asked: list[tuple[str, str]] = []
        requested = asyncio.Event()

        def exclusive(folder: str, collection: str) -> AbstractAsyncContextManager[None]:
            asked.append((folder, collection))
            requested.set()
            return held(folder, collection)

        monkeypatch.setattr(ledger, "exclusive", exclusive)
        async with asyncio.timeout(60):
            dry = await doubles.sync(request, options, dry_run=True)
        assert dry.added == ["a.md"] and dry.dry_run and asked == []
        task = asyncio.create_task(doubles.sync(request, options))
        async with asyncio.timeout(60):
            await requested.wait()
        await asyncio.sleep(0.2)  # time to write, were the lock not held
        assert asked == [(str(folder), "synced")] and not task.done() and doubles.sink.documents == {}
    async with asyncio.timeout(60):
        report = await task
    assert report.added == ["a.md"] and await doubles.stored("a.md") == {"a.md"}
