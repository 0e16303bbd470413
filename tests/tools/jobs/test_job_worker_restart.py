"""A job worker across a restart of the real Postgres (its own, in a data dir of this module, so the session's is not
disturbed; no Triton: the worker's ingest step is a recording double): the worker meets the outage as the store's
`StoreUnavailableError`, backs off instead of ending, and once Postgres is back it claims and runs a job queued after
the restart; then it stops cleanly when told to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import asyncpg
import pytest
from tenacity import RetryCallState
from tenacity.wait import wait_base

from agent.config.settings import Settings
from infra import postgres
from infra.config import StackConfig
from tests.store_helpers import own_postgres
from tools.embedder import TritonEmbedder
from tools.ingest import IngestOptions
from tools.ingest.ports import SyncLedger
from tools.jobs import worker
from tools.records import Job, JobFile
from tools.store import VectorStore
from tools.store.jobs import PostgresJobQueue

pytestmark = pytest.mark.stack


@pytest.fixture
def pg(settings: Settings, server_root: Path) -> Iterator[Settings]:
    """A Postgres of this test's own (the test stops and starts it), stopped by PID at the end."""
    with own_postgres(settings, server_root, "job-restart") as own:
        yield own


class WatchedQueue(PostgresJobQueue):
    """The product's queue; `answered` is set each time a claim got an answer from Postgres."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool, acquire_timeout_s=5)
        self.answered = asyncio.Event()

    async def claim(self, worker: str, lease_s: float, max_attempts: int = 3) -> Job | None:
        job = await super().claim(worker, lease_s, max_attempts)
        self.answered.set()
        return job

    async def document_chunks(self, doc_id: str, collection: str = "default") -> int:
        return 1  # the double ingest stores nothing


class OutageSeen(wait_base):
    """A tenacity wait of 0.1 s that records that the worker is backing off (`seen`, `tries`)."""

    def __init__(self) -> None:
        self.seen = asyncio.Event()
        self.tries = 0

    def __call__(self, retry_state: RetryCallState) -> float:
        self.tries += 1
        self.seen.set()
        return 0.1


async def first_of(task: asyncio.Task[None], event: asyncio.Event) -> None:
    """Wait until `event` is set or `task` ends, whichever comes first."""
    waiter = asyncio.create_task(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def test_the_job_worker_survives_a_postgres_restart_then_runs_a_queued_job(
    pg: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = pg.resolved_database_url()
    ingested: list[str] = []

    async def fake_ingest(inputs: list[Any], *args: Any, **kwargs: Any) -> SimpleNamespace:
        ingested.extend(Path(i.doc_id).name for i in inputs)
        return SimpleNamespace(chunks=1, file_errors=[], failed=[])

    monkeypatch.setattr(worker, "ingest", fake_ingest)
    stop = asyncio.Event()

    async def stop_after_the_job(job: Job, done: int) -> None:
        stop.set()  # the worker finishes this job, then its loop ends

    backoff = OutageSeen()
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    queue = WatchedQueue(pool)
    nothing = cast(Any, None)
    task = asyncio.create_task(
        worker.work(
            queue,
            cast(TritonEmbedder, nothing),
            cast(VectorStore, nothing),
            cast(SyncLedger, nothing),
            options=IngestOptions(chunk_tokens=128, overlap_tokens=16, max_file_bytes=1 << 20),
            lease_s=600,
            poll_s=0.05,
            stop=stop,
            worker="restart",
            after_file=stop_after_the_job,
            backoff=backoff,
        )
    )
    try:
        with caplog.at_level(logging.WARNING, logger=worker.__name__):
            await first_of(task, queue.answered)  # the worker polls; its pool holds a connection to the server
            assert not task.done(), task
            postgres.stop(StackConfig.of(pg))
            try:
                await first_of(task, backoff.seen)  # the worker meets the outage
                assert not task.done(), task  # and backs off instead of ending
            finally:
                postgres.start(StackConfig.of(pg))
            assert pg.resolved_database_url() == url
            async with asyncpg.create_pool(url, min_size=1, max_size=1) as own:  # the test's own, fresh connections
                job_id = await PostgresJobQueue(own).submit(
                    [JobFile("after-restart.txt", b"Vitamin B12 lowers homocysteine.")]
                )
                await asyncio.wait_for(task, 300)  # a bound for a loaded machine: the worker runs the job, then stops
                job = await PostgresJobQueue(own).get(job_id)
    finally:
        stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await pool.close()
    assert task.result() is None  # ended by the stop, not by an error
    assert backoff.tries >= 1 and ingested == ["after-restart.txt"]
    assert job is not None and (job.status, job.files_done, job.worker, job.errors) == ("done", 1, "restart", [])
    assert any("the store is unavailable" in r.getMessage() for r in caplog.records)
