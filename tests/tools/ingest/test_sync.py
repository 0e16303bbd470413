"""`tools.ingest.sync` against the real Postgres and the real Triton, for what only they show: the whole run over
the real servers (after edits, deletions and a rename the collection equals a fresh ingest of the folder, chunk ids
renamed, embedding only the changed chunks; a second run writes nothing, the collection's version unchanged), one
sync of a folder at a time across connections (the advisory lock), and a synced document deleted by hand taking its
sync state with it. The sync's own logic runs over the in-memory doubles in `test_sync_logic.py`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from evals.bench_sync import (
    change_folder,
    chunk_texts,
    collection_version,
    differences,
    snapshot,
)
from tests.sync_scenario import check_second_sync, make_folder
from tools.embedder import TritonEmbedder
from tools.ingest import ingest, plan_inputs
from tools.ingest.sync import CountingEmbedder, SyncRequest, sync_folder
from tools.originals import Originals
from tools.records import chunk_id
from tools.store import VectorStore
from tools.store.sync_state import SYNC_LOCK, PostgresSyncLedger


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
    folder, names, other = make_folder(tmp_path)
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
    embedded_before = counted.calls, counted.texts
    second = await sync_folder(request, counted, store, PostgresSyncLedger(store), options, originals=originals)
    check_second_sync(second, change, before, after, counted, embedded_before)

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
        request = SyncRequest(folder, collection="synced")
        task = asyncio.create_task(sync_folder(request, embedder, store, ledger, ingest_options(settings)))
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
