"""Searches spread over a real streaming replica of the test's own Postgres (made with the embedded server's
`pg_basebackup`): searches go to the replica, writes and listings to the primary; a search right after an ingest
finds the new document; a replica that lags or is down is skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from agent.config.settings import Settings
from evals.retrieval_eval import ensure_database
from tests import replica as standby
from tests.store_helpers import DIM, MODEL, own_postgres, record
from tools.store import VectorStore

DATABASE = "test_store_replicas"
MAX_LAG_S = 60.0
"""The stores' lag bound, seconds: far above any replay time on a loaded machine, so that a write always waits
until the replica has replayed it (the wait ends at the replay, not at the bound) and the replica always serves."""
PAUSED_LAG_S = 0.5
"""The lag bound of the test that pauses the replay, seconds: how long its write waits for a replay that cannot
come."""


@pytest.fixture(scope="module")
def primary(settings: Settings, postgres_url: str, server_root: Path) -> Iterator[str]:
    """A primary of this module's own (`postgres_url` marks the module `stack`); yields its server URL."""
    with own_postgres(settings, server_root, "store-replicas") as own:
        yield own.resolved_database_url()


@pytest.fixture(scope="module")
def replica(primary: str) -> Iterator[standby.Replica]:
    with standby.streaming_replica(primary) as running:
        yield running


@pytest.fixture
async def store(primary: str, replica: standby.Replica) -> AsyncIterator[VectorStore]:
    """An empty store on the primary that searches the replica, opened once the replica has replayed the database,
    its schema and the emptying (a replica probed before it has the database is skipped as down for a while)."""
    url = await ensure_database(primary, DATABASE)
    async with VectorStore(url, MODEL, DIM) as setup:
        await setup.delete_documents([d.doc_id for d in await setup.list_documents()])
    await standby.caught_up(url, replica.url(DATABASE))
    async with VectorStore(url, MODEL, DIM, read_urls=[replica.url(DATABASE)], read_max_lag_s=MAX_LAG_S) as st:
        yield st


async def top_doc(store: VectorStore, doc_id: str) -> str:
    """The doc id of the best dense hit for `doc_id`'s own chunk vector."""
    hits = await store.dense_search(record(doc_id, ["x"]).chunks[0].embedding, 1)
    return hits[0].doc_id if hits else ""


async def test_searches_go_to_the_replica_and_find_a_document_right_after_its_ingest(
    store: VectorStore, replica: standby.Replica
) -> None:
    for i in range(5):
        await store.add_documents([record(f"doc{i}", [f"zebra number {i}"])])
        assert await top_doc(store, f"doc{i}") == f"doc{i}"  # right after the write returned
        assert (await store.full_text_search(f"zebra {i}", 10, rank="bm25"))[0].doc_id == f"doc{i}"
        assert await store.get_document(f"doc{i}") == (f"title doc{i}", f"zebra number {i}")
    assert store.search_targets == {replica.url(DATABASE): 15}
    assert [d.doc_id for d in await store.list_documents()] == [f"doc{i}" for i in range(5)]  # on the primary
    # Another process that wrote nothing finds the writes on the replica too: the writer waited for the replay.
    async with VectorStore(store.dsn, MODEL, DIM, read_urls=store.read_urls, read_max_lag_s=MAX_LAG_S) as other:
        # Opening a store writes WAL (its idempotent schema set-up); until the replica has replayed that, a store
        # that has seen no replica position yet cannot tell its lag and reads from the primary.
        await standby.caught_up(store.dsn, replica.url(DATABASE))
        assert await top_doc(other, "doc4") == "doc4" and other.search_targets == {replica.url(DATABASE): 1}


async def test_a_lagging_replica_is_skipped_until_it_has_replayed(
    store: VectorStore, replica: standby.Replica
) -> None:
    async with VectorStore(store.dsn, MODEL, DIM, read_urls=store.read_urls, read_max_lag_s=PAUSED_LAG_S) as lagging:
        await lagging.add_documents([record("before", ["okapi"])])
        lagging.search_targets.clear()
        await skipped_while_paused(lagging, replica)


async def skipped_while_paused(store: VectorStore, replica: standby.Replica) -> None:
    """Pause the replica's replay, write, and check that searches read from the primary until it resumes."""
    paused = await asyncpg.connect(replica.url(DATABASE))
    try:
        await paused.execute("SELECT pg_wal_replay_pause()")
        await store.add_documents([record("during", ["giraffe"])])  # waits PAUSED_LAG_S for the replay, in vain
        assert await top_doc(store, "during") == "during"  # read from the primary: the replica is behind this write
        assert store.search_targets == {"primary": 1}
        async with VectorStore(store.dsn, MODEL, DIM, read_urls=store.read_urls, read_max_lag_s=PAUSED_LAG_S) as other:
            # Another process skips it by its lag: the primary is past what the replica has replayed, and no
            # position this process has seen the replica reach is recent enough.
            assert await top_doc(other, "during") == "during"
            assert other.search_targets == {"primary": 1}
        await paused.execute("SELECT pg_wal_replay_resume()")
        for _ in range(600):
            if await top_doc(store, "during") == "during" and store.search_targets[replica.url(DATABASE)]:
                break
            await paused.execute("SELECT pg_sleep(0.05)")
        else:
            pytest.fail("searches never went back to the replica after it caught up")
    finally:
        if not paused.is_closed():
            await paused.execute("SELECT pg_wal_replay_resume()")
            await paused.close()


async def test_a_replica_that_is_down_is_skipped(store: VectorStore, replica: standby.Replica) -> None:
    await store.add_documents([record("kept", ["aardvark"])])
    assert await top_doc(store, "kept") == "kept" and store.search_targets == {replica.url(DATABASE): 1}
    replica.stop()
    try:
        await store.add_documents([record("while-down", ["termites"])])  # does not wait for a replica that is down
        assert await top_doc(store, "while-down") == "while-down"
        assert await top_doc(store, "kept") == "kept"
        assert store.search_targets["primary"] == 2
    finally:
        restarted = standby.start(replica.data)
        replica.pid = restarted.pid
