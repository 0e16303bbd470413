"""Sync jobs against the real Postgres: a jobs table made before job kinds gains the `kind` column with `upload` for
its rows, and takes sync jobs. (A sync job's run is the worker's logic: `test_worker_logic.py`.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tools.store.jobs import PostgresJobQueue

OLD_JOBS_TABLE = """
CREATE TABLE ingest_jobs (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
    created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz,
    lease_until timestamptz, worker text, attempts integer NOT NULL DEFAULT 0, prefix text NOT NULL DEFAULT '',
    files_total integer NOT NULL, files_done integer NOT NULL DEFAULT 0, chunks integer NOT NULL DEFAULT 0,
    errors jsonb NOT NULL DEFAULT '[]', timings jsonb NOT NULL DEFAULT '{}'
);
INSERT INTO ingest_jobs (files_total, status) VALUES (1, 'done');
"""


@pytest.fixture
async def pool(fresh_db: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on a new, empty database of the test Postgres, dropped afterwards."""
    async with asyncpg.create_pool(fresh_db, min_size=1, max_size=2) as made:
        yield made


async def test_a_jobs_table_made_before_job_kinds_gains_the_kind_column(pool: asyncpg.Pool) -> None:
    await pool.execute(OLD_JOBS_TABLE)
    queue = PostgresJobQueue(pool)
    await queue.setup()
    old = await queue.get(1)
    assert old is not None and old.kind == "upload" and old.result is None and old.params == {}
    job_id = await queue.submit_sync({"path": "/data/folder"}, "kb")
    job = await queue.claim("w", 30.0)
    assert job is not None and job.id == job_id and job.kind == "sync"
