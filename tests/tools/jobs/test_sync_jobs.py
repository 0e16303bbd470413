"""Sync jobs against the real Postgres and the real Triton: a job of kind `sync` queued with a folder is run by the
same worker as uploads and records the sync's summary as its result; a jobs table made before job kinds gains the
`kind` column with `upload` for its rows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from tools.embedder import TritonEmbedder
from tools.jobs.worker import run_job
from tools.store import VectorStore
from tools.store.jobs import PostgresJobQueue
from tools.store.sync_state import PostgresSyncLedger

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
async def store(fresh_db: str, embedder: TritonEmbedder) -> AsyncIterator[VectorStore]:
    async with VectorStore(fresh_db, embedder.spec.name, embedder.spec.dim) as st:
        yield st


async def test_a_sync_job_runs_the_sync_and_records_its_summary(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    conn = await asyncpg.connect(store.dsn)
    try:
        await conn.execute(OLD_JOBS_TABLE)
    finally:
        await conn.close()
    queue = PostgresJobQueue(store.pool)
    await queue.setup()
    old = await queue.get(1)
    assert old is not None and old.kind == "upload" and old.result is None

    (tmp_path / "a.md").write_text("# Alpha\n\nThe narwhal backup job runs every night at two.\n")
    (tmp_path / "b.txt").write_text("The okapi gateway listens on port 8080.\n")
    job_id = await queue.submit_sync({"path": str(tmp_path), "exclude": ["*.txt"]}, "kb")
    job = await queue.claim("w", 30.0)
    assert job is not None and job.id == job_id and job.kind == "sync"
    options = ingest_options(settings)
    done = await run_job(
        job,
        queue,
        embedder,
        store,
        PostgresSyncLedger(store),
        worker="w",
        options=options,
        lease_s=30.0,
        sync_roots=[tmp_path],
    )
    assert done is not None and done.status == "done", done
    assert done.result is not None and done.result["added"] == ["a.md"] and done.result["embed_calls"] == 1
    assert (done.files_done, done.files_total, done.errors) == (1, 1, [])
    assert set(await store.stored_versions(["a.md", "b.txt"], "kb")) == {"a.md"}


async def test_a_sync_job_outside_the_workers_sync_roots_fails(
    tmp_path: Path, embedder: TritonEmbedder, store: VectorStore, settings: Settings
) -> None:
    """The worker checks the job's folder against its own `SYNC_ROOTS` when it runs the job (they may have changed
    since it was queued): outside them, or none set, the job fails saying so and nothing is synced."""
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (other / "a.md").write_text("# Alpha\n\nNot to be synced.\n")
    queue = PostgresJobQueue(store.pool)
    await queue.setup()
    options = ingest_options(settings)
    for roots in ([allowed], []):
        await queue.submit_sync({"path": str(other)}, "kb")
        job = await queue.claim("w", 30.0)
        assert job is not None
        done = await run_job(
            job,
            queue,
            embedder,
            store,
            PostgresSyncLedger(store),
            worker="w",
            options=options,
            lease_s=30.0,
            sync_roots=roots,
        )
        assert done is not None and done.status == "failed"
        assert "SYNC_ROOTS" in done.errors[-1]["error"] and str(other) in done.errors[-1]["error"]
    assert await store.stored_versions(["a.md"], "kb") == {}
