"""Job leases against the real Postgres (no Triton: the worker's ingest step is a recording double): a worker that
loses its lease while alive (paused past it, another worker claimed the job) stops before its next file and writes
nothing more to the job (every write is fenced by the claim's attempt number), and a job whose worker keeps dying
(a file that crashes the process) is failed after `max_attempts` claims instead of being retried forever."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import asyncpg
import pytest

from tools.embedder import TritonEmbedder
from tools.ingest import IngestOptions
from tools.ingest.ports import SyncLedger
from tools.jobs import worker
from tools.store import VectorStore
from tools.store.jobs import Job, JobFile, PostgresJobQueue


@pytest.fixture
async def queue(fresh_db: str) -> AsyncIterator[PostgresJobQueue]:
    """A jobs queue on a new, empty database of the test Postgres, dropped afterwards."""
    pool = await asyncpg.create_pool(fresh_db, min_size=1, max_size=4)
    try:
        jobs = PostgresJobQueue(pool)
        await jobs.setup()
        yield jobs
    finally:
        await pool.close()


async def expire_lease(queue: PostgresJobQueue, job_id: int) -> None:
    """The lease of `job_id` ran out (as when its worker paused past it): no clock is waited for."""
    await queue.pool.execute("UPDATE ingest_jobs SET lease_until = now() - interval '1 second' WHERE id = $1", job_id)


async def test_a_worker_that_lost_its_lease_stops_and_writes_nothing_more(
    queue: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [JobFile(f"note{i}.txt", b"Vitamin B12 lowers homocysteine.") for i in range(3)]
    job_id = await queue.submit(files)
    ingested: list[str] = []

    async def fake_ingest(inputs: list[Any], *args: Any, **kwargs: Any) -> SimpleNamespace:
        ingested.extend(Path(i.doc_id).name for i in inputs)
        return SimpleNamespace(chunks=1, file_errors=[], failed=[])

    async def one_chunk(doc_id: str, collection: str = "default") -> int:
        return 1

    monkeypatch.setattr(worker, "ingest", fake_ingest)
    monkeypatch.setattr(queue, "document_chunks", one_chunk)
    claimed = await queue.claim("A", 600)
    assert claimed is not None and claimed.attempts == 1
    taken: list[Job] = []

    async def paused_after_first_file(job: Job, done: int) -> None:
        if done == 1:  # A pauses past its lease; B claims the job
            await expire_lease(queue, job.id)
            again = await queue.claim("B", 600)
            assert again is not None and again.id == job.id
            taken.append(again)

    nothing = cast(Any, None)
    await worker.run_job(
        claimed,
        queue,
        cast(TritonEmbedder, nothing),
        cast(VectorStore, nothing),
        cast(SyncLedger, nothing),
        worker="A",
        options=IngestOptions(chunk_tokens=128, overlap_tokens=16, max_file_bytes=1 << 20),
        lease_s=600,
        after_file=paused_after_first_file,
    )
    assert ingested == ["note0.txt"]  # A stopped at once: the other files are B's to ingest, once
    state = await queue.get(job_id)
    assert state is not None and taken
    assert (state.status, state.worker, state.attempts, state.files_done) == ("running", "B", 2, 0)
    assert state.finished_at is None and state.errors == []
    # and a stale claim's writes are refused, even under the same worker name
    assert not await queue.heartbeat(job_id, "A", 600, attempt=1)
    assert not await queue.progress(job_id, "B", 3, 3, [], attempt=1)
    assert not await queue.finish(job_id, "B", "done", {}, attempt=1)
    assert await queue.progress(job_id, "B", 1, 1, [], attempt=2)


async def test_a_job_whose_worker_keeps_dying_is_failed_after_max_attempts(queue: PostgresJobQueue) -> None:
    job_id = await queue.submit([JobFile("crash.pdf", b"%PDF-1.7 crashes the reader")])
    for attempt in (1, 2, 3):
        claimed = await queue.claim(f"w{attempt}", 600, max_attempts=3)
        assert claimed is not None and claimed.attempts == attempt
        await expire_lease(queue, job_id)  # its worker died mid-file: nobody renews the lease
    assert await queue.claim("w4", 600, max_attempts=3) is None
    state = await queue.get(job_id)
    assert state is not None and state.status == "failed" and state.finished_at is not None
    assert "3 times" in state.errors[-1]["error"] and state.errors[-1]["file"] == ""


async def file_rows(queue: PostgresJobQueue, job_id: int) -> int:
    return int(await queue.pool.fetchval("SELECT count(*) FROM ingest_job_files WHERE job_id = $1", job_id))


async def test_a_finished_or_abandoned_job_keeps_its_row_but_not_its_uploaded_bytes(queue: PostgresJobQueue) -> None:
    done_id = await queue.submit([JobFile("a.txt", b"Vitamin B12.")])
    dead_id = await queue.submit([JobFile("b.txt", b"Folate.")])
    claimed = await queue.claim("A", 600)
    assert claimed is not None and claimed.id == done_id and await file_rows(queue, done_id) == 1
    assert await queue.finish(done_id, "A", "done", {}, attempt=claimed.attempts)
    assert await file_rows(queue, done_id) == 0
    state = await queue.get(done_id)
    assert state is not None and state.status == "done"
    dying = await queue.claim("B", 600, max_attempts=1)  # its worker dies: the lease runs out after 1 claim
    assert dying is not None and dying.id == dead_id
    await expire_lease(queue, dead_id)
    assert await queue.claim("C", 600, max_attempts=1) is None
    failed = await queue.get(dead_id)
    assert failed is not None and failed.status == "failed" and await file_rows(queue, dead_id) == 0


async def test_setup_deletes_the_bytes_of_jobs_that_ended_before_the_rule(queue: PostgresJobQueue) -> None:
    job_id = await queue.submit([JobFile("a.txt", b"Vitamin B12.")])
    await queue.pool.execute("UPDATE ingest_jobs SET status = 'done', finished_at = now() WHERE id = $1", job_id)
    queued = await queue.submit([JobFile("b.txt", b"Folate.")])
    await queue.setup()
    assert await file_rows(queue, job_id) == 0 and await file_rows(queue, queued) == 1
