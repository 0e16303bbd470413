"""The jobs table's migration against the real Postgres: `setup` deletes the uploaded bytes of jobs that ended
before finished jobs dropped them. (Leases, fencing, `max_attempts` and dropped bytes are the queue's contract,
`tests/contracts/test_job_queue.py`, over the double and Postgres; a worker that lost its lease is the worker's logic,
`test_worker_logic.py`.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tools.records import JobFile
from tools.store.jobs import PostgresJobQueue


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


async def file_rows(queue: PostgresJobQueue, job_id: int) -> int:
    return int(await queue.pool.fetchval("SELECT count(*) FROM ingest_job_files WHERE job_id = $1", job_id))


async def test_setup_deletes_the_bytes_of_jobs_that_ended_before_the_rule(queue: PostgresJobQueue) -> None:
    job_id = await queue.submit([JobFile("a.txt", b"Vitamin B12.")])
    await queue.pool.execute("UPDATE ingest_jobs SET status = 'done', finished_at = now() WHERE id = $1", job_id)
    queued = await queue.submit([JobFile("b.txt", b"Folate.")])
    await queue.setup()
    assert await file_rows(queue, job_id) == 0 and await file_rows(queue, queued) == 1
