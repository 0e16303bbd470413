"""`tools.ingest.ports.SyncLedger`: the in-memory ledger and Postgres' sync tables answer alike (sources, a file's
state written with its document and seen by the next plan, adoption of a stored document, removals that spare a
document another source names, moves with and without a new version, and one holder of a source's lock at a time)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.contracts.ports import Ledger, record
from tools.records import FileState, FileStatus

FOLDER, OTHER = "/data/folder", "/data/other"


def state(rel: str, content_hash: str | None, *, doc_id: str | None = None, status: FileStatus = "stored") -> FileState:
    """The state of file `rel` owning document `doc_id` (default: `rel`) of `content_hash`."""
    return FileState(rel, 10, 1_000, f"f-{rel}", doc_id or rel, content_hash, status)


async def source(ledger: Ledger, folder: str = FOLDER, collection: str = "synced") -> int:
    """The id of the source of `folder` in `collection`, opened with no prefix or globs."""
    return await ledger.ledger.open_source(folder, collection, folder, "", (), ())


async def test_a_source_is_found_once_opened_with_its_last_options(sync_ledger: Ledger) -> None:
    ledger = sync_ledger.ledger
    assert await ledger.find_source(FOLDER, "synced") is None
    first = await ledger.open_source(FOLDER, "synced", "/data", "kb/", ["*.md"], ["drafts/*"])
    again = await ledger.open_source(FOLDER, "synced", "/data", "wiki/", [], [])
    other = await ledger.open_source(FOLDER, "elsewhere", FOLDER, "", [], [])
    assert first == again != other
    found = await ledger.find_source(FOLDER, "synced")
    assert found is not None and found.id == first
    assert (found.folder, found.collection, found.root, found.prefix) == (FOLDER, "synced", "/data", "wiki/")
    assert (found.include, found.exclude) == ((), ())
    assert await ledger.files(first) == {}


async def test_a_files_state_written_with_its_document_is_seen_by_the_next_plan(sync_ledger: Ledger) -> None:
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    doc = record("a.md", "Herons fish at dawn.")
    stored = await ledger.store_file(source_id, "synced", state("a.md", doc.content_hash), doc)
    assert (stored.counts.added, stored.counts.chunks, stored.removed) == (1, 1, None)
    assert await ledger.files(source_id) == {"a.md": state("a.md", doc.content_hash)}
    assert await sink.stored_versions(["a.md"], "synced") == {"a.md": doc.content_hash}
    touched = replace(state("a.md", doc.content_hash), size=11, mtime_ns=2_000)
    await ledger.touch(source_id, touched)
    assert await ledger.files(source_id) == {"a.md": touched}
    await ledger.finished(source_id)


async def test_a_stored_document_is_adopted_unchanged_or_reported_missing(sync_ledger: Ledger) -> None:
    """`record` None: the document stored under the file's id with that hash is the file's (nothing written but
    the state); not stored with that hash, its id is `missing` and nothing is written."""
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    doc = record("a.md", "Ingested before the sync.")
    await sink.add_documents([doc], collection="synced")
    adopted = await ledger.store_file(source_id, "synced", state("a.md", doc.content_hash), None)
    assert (adopted.counts.skipped, adopted.counts.missing) == (1, ())
    missing = await ledger.store_file(source_id, "synced", state("b.md", "h-gone"), None)
    assert missing.counts.missing == ("b.md",)
    assert set(await ledger.files(source_id)) == {"a.md"}


async def test_a_file_without_text_removes_the_document_its_state_owned(sync_ledger: Ledger) -> None:
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    doc = record("a.md", "Otters float.")
    await ledger.store_file(source_id, "synced", state("a.md", doc.content_hash), doc)
    emptied = await ledger.store_file(source_id, "synced", state("a.md", None, status="empty"), None)
    assert emptied.removed == "a.md"
    assert await sink.stored_versions(["a.md"], "synced") == {}
    assert (await ledger.files(source_id))["a.md"].status == "empty"


async def test_a_new_doc_id_removes_the_old_document_with_the_new_write(sync_ledger: Ledger) -> None:
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    old = record("a.md", "Version one.")
    await ledger.store_file(source_id, "synced", state("a.md", old.content_hash), old)
    new = record("kb/a.md", "Version two.")
    stored = await ledger.store_file(source_id, "synced", state("a.md", new.content_hash, doc_id="kb/a.md"), new)
    assert stored.removed == "a.md"
    assert set(await sink.stored_versions(["a.md", "kb/a.md"], "synced")) == {"kb/a.md"}


async def test_a_removal_spares_a_document_another_source_of_the_collection_names(sync_ledger: Ledger) -> None:
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    mine, theirs = await source(sync_ledger), await source(sync_ledger, OTHER)
    shared, own = record("shared.md", "Both folders hold it."), record("own.md", "Only mine.")
    for source_id in (mine, theirs):
        await ledger.store_file(source_id, "synced", state("shared.md", shared.content_hash), shared)
    await ledger.store_file(mine, "synced", state("own.md", own.content_hash), own)
    assert await ledger.remove(mine, "synced", state("shared.md", shared.content_hash)) is False
    assert await ledger.remove(mine, "synced", state("own.md", own.content_hash)) is True
    assert await ledger.remove(mine, "synced", state("gone.md", None, status="empty")) is False
    assert set(await sink.stored_versions(["shared.md", "own.md"], "synced")) == {"shared.md"}
    assert await ledger.files(mine) == {}
    assert set(await ledger.files(theirs)) == {"shared.md"}


async def test_a_move_keeps_the_document_under_its_new_id(sync_ledger: Ledger) -> None:
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    doc = record("a.md", "Herons fish at dawn.", "Otters float.")
    old = state("a.md", doc.content_hash)
    await ledger.store_file(source_id, "synced", old, doc)
    new = state("moved/a.md", doc.content_hash)
    counts = await ledger.move(source_id, "synced", old, new, "/data/folder/moved/a.md", None)
    assert counts.missing == ()
    assert await sink.stored_versions(["a.md", "moved/a.md"], "synced") == {"moved/a.md": doc.content_hash}
    assert sorted(await sink.chunk_vectors(["moved/a.md"], "synced")) == ["moved/a.md"]
    assert await ledger.files(source_id) == {"moved/a.md": new}


async def test_a_move_with_a_new_version_replaces_both(sync_ledger: Ledger) -> None:
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    doc = record("a.txt", "Titled by its file name a.")
    old = state("a.txt", doc.content_hash)
    await ledger.store_file(source_id, "synced", old, doc)
    version = record("b.txt", "Titled by its file name b.")
    counts = await ledger.move(source_id, "synced", old, state("b.txt", version.content_hash), "b.txt", version)
    assert (counts.added, counts.chunks) == (1, 1)
    assert await sink.stored_versions(["a.txt", "b.txt"], "synced") == {"b.txt": version.content_hash}
    assert set(await ledger.files(source_id)) == {"b.txt"}


async def test_a_move_whose_document_is_gone_leaves_the_target_alone(sync_ledger: Ledger) -> None:
    """A move of a document no longer stored (another run moved it already) writes nothing and says so; the document
    stored under the new id stays."""
    ledger, sink = sync_ledger.ledger, sync_ledger.sink
    source_id = await source(sync_ledger)
    doc = record("b.md", "Otters float on their backs.")
    recorded = state("b.md", doc.content_hash)
    await ledger.store_file(source_id, "synced", recorded, doc)
    old = replace(recorded, rel_path="a.md", doc_id="a.md")
    counts = await ledger.move(source_id, "synced", old, recorded, "/data/folder/b.md", None)
    assert counts.missing == ("a.md",)
    assert set(await sink.stored_versions(["a.md", "b.md"], "synced")) == {"b.md"}
    assert await ledger.files(source_id) == {"b.md": recorded}


async def test_the_lock_of_a_source_excludes_a_second_holder_and_no_other_source(sync_ledger: Ledger) -> None:
    """A second holder of a source's lock enters only once the first left; another source's lock is free meanwhile
    (entered while the first is held, within a bound: a lock that excluded it would never be entered)."""
    ledger = sync_ledger.ledger
    order: list[str] = []

    async def second() -> None:
        async with ledger.exclusive(FOLDER, "synced"):
            order.append("second in")

    async with ledger.exclusive(FOLDER, "synced"):
        order.append("first in")
        waiting = asyncio.create_task(second())
        async with asyncio.timeout(60):
            async with ledger.exclusive(OTHER, "synced"), ledger.exclusive(FOLDER, "elsewhere"):
                order.append("others in")
        await asyncio.sleep(0.5)  # time for the second holder to enter, were the lock not held
        order.append("first out")
    async with asyncio.timeout(60):
        await waiting
    assert order == ["first in", "others in", "first out", "second in"]
