"""Ingestion jobs against the real Postgres and the real Triton: a job whose worker is killed by PID mid-run (at a
point the test controls) is claimed again once its lease expires and ends with the same chunks as a clean run;
several workers share the queue with each job run once; `rag jobs show|list` report status, files, chunks, errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agent.config.settings import Settings
from agent.core.wiring import build_embedder
from tests.conftest import REPO_ROOT, cli_env
from tests.document_files import GUIDE_HTML, zip_named
from tests.store_helpers import scratch_databases
from tools.embedder import TritonEmbedder
from tools.ingest import IngestOptions
from tools.jobs import work
from tools.records import JobFile
from tools.store import VectorStore
from tools.store.jobs import PostgresJobQueue
from tools.store.sync_state import PostgresSyncLedger

LEASE_S = 2.0
DONE_WITHIN_S = 600.0
"""A bound on waiting for a job to finish on a loaded machine (the outcome does not depend on it)."""


@pytest.fixture
async def fresh_dbs(postgres_url: str) -> AsyncIterator[list[str]]:
    """Two new, empty databases on the test Postgres, dropped afterwards."""
    async with scratch_databases(postgres_url, "jobs", count=2) as urls:
        yield urls


@pytest.fixture
async def embedder(triton_server: Settings) -> AsyncIterator[TritonEmbedder]:
    async with build_embedder(triton_server, max_in_flight=2, timeout_s=600) as emb:
        yield emb


def job_files(tmp: Path) -> list[JobFile]:
    zip_named(tmp / "archive.pdf")
    return [
        JobFile("guide.html", GUIDE_HTML.encode()),
        JobFile("notes.md", b"# Notes\n\n## Backups\n\nThe narwhal backup job runs every night at two.\n"),
        JobFile("archive.pdf", (tmp / "archive.pdf").read_bytes()),
        JobFile("readme.txt", b"Read me: the okapi gateway listens on port 8080.\n"),
        JobFile("faq.md", b"# FAQ\n\nWhy is the sky blue? Rayleigh scattering of sunlight.\n"),
    ]


def start_probe(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        # As a module from the repository root: run by path, `tests/` would lead sys.path and its `agent/` folder
        # (the tests of `agent/`) would hide the product's `agent` package.
        [sys.executable, "-m", "tests.job_worker_probe"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def rag(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent", *args], env=env, capture_output=True, text=True, timeout=300)


async def fingerprint(url: str) -> set[tuple[str, str, str]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT c.chunk_id, md5(c.text) AS h, c.metadata::text AS m FROM chunks c JOIN documents d "
            "ON d.id = c.document_id"
        )
    finally:
        await conn.close()
    return {(r["chunk_id"], r["h"], r["m"]) for r in rows}


async def run_until_done(
    queue: PostgresJobQueue, embedder: TritonEmbedder, store: VectorStore, ids: list[int], workers: int
) -> None:
    stop = asyncio.Event()
    ledger = PostgresSyncLedger(store)
    loops = [
        asyncio.create_task(
            work(
                queue,
                embedder,
                store,
                ledger,
                options=IngestOptions(chunk_tokens=200, overlap_tokens=40, max_file_bytes=10_000_000),
                lease_s=LEASE_S,
                poll_s=0.2,
                stop=stop,
                worker=f"test:{i}",
            )
        )
        for i in range(workers)
    ]
    try:
        async with asyncio.timeout(DONE_WITHIN_S):
            while True:
                jobs = [await queue.get(i) for i in ids]
                if all(j is not None and j.status in ("done", "failed") for j in jobs):
                    break
                await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.gather(*loops)


async def test_a_job_whose_worker_is_killed_ends_with_the_chunks_of_a_clean_run(
    triton_server: Settings, fresh_dbs: list[str], embedder: TritonEmbedder, tmp_path: Path
) -> None:
    killed_db, clean_db = fresh_dbs
    files = job_files(tmp_path)
    spec = embedder.spec

    # A clean run, for reference.
    async with VectorStore(clean_db, spec.name, spec.dim) as store:
        queue = PostgresJobQueue(store.pool)
        await queue.setup()
        clean_id = await queue.submit(files, prefix="up/")
        await run_until_done(queue, embedder, store, [clean_id], workers=1)
        clean = await queue.get(clean_id)
    assert clean is not None and clean.status == "done" and clean.attempts == 1

    env = cli_env(triton_server) | {
        "DATABASE_URL": killed_db,
        "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"),
        "JOBS_LEASE_S": str(LEASE_S),
        "PYTHONPATH": str(REPO_ROOT),
    }
    async with VectorStore(killed_db, spec.name, spec.dim) as store:
        queue = PostgresJobQueue(store.pool)
        await queue.setup()
        job_id = await queue.submit(files, prefix="up/")
        probe = start_probe(env)
        try:
            assert probe.stdout is not None
            async with asyncio.timeout(DONE_WITHIN_S):  # the probe pauses after the job's first file
                line = await asyncio.to_thread(probe.stdout.readline)
            assert line.strip() == f"paused {job_id}", probe.stderr.read() if probe.stderr else ""
            running = await queue.get(job_id)
            assert running is not None and (running.status, running.files_done, running.worker) == (
                "running",
                1,
                "probe",
            )
        finally:
            os.kill(probe.pid, signal.SIGKILL)
            probe.wait()
        await run_until_done(queue, embedder, store, [job_id], workers=1)
        job = await queue.get(job_id)
    assert job is not None and job.status == "done"
    assert job.attempts == 2 and job.worker == "test:0"  # claimed again after the killed worker's lease expired
    assert (job.files_done, job.files_total, job.chunks) == (5, 5, clean.chunks)
    assert [e["file"] for e in job.errors] == ["archive.pdf"] and "ZIP archive" in job.errors[0]["error"]
    assert str(tmp_path) not in json.dumps(job.errors)  # the worker's temporary path is not shown
    assert await fingerprint(killed_db) == await fingerprint(clean_db)

    shown = rag(env, "jobs", "show", str(job_id), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) | {"errors": []} == job.to_json() | {"errors": []}
    listed = rag(env, "jobs", "list", "--json")
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == [job_id]


async def test_several_workers_run_each_job_once(fresh_dbs: list[str], embedder: TritonEmbedder) -> None:
    spec = embedder.spec
    async with VectorStore(fresh_dbs[0], spec.name, spec.dim) as store:
        queue = PostgresJobQueue(store.pool)
        await queue.setup()
        ids = [await queue.submit([JobFile(f"n{i}.md", f"# Note {i}\n\nText of note {i}.".encode())]) for i in range(6)]
        await run_until_done(queue, embedder, store, ids, workers=3)
        jobs = [await queue.get(i) for i in ids]
        assert all(j is not None and (j.status, j.attempts, j.files_done) == ("done", 1, 1) for j in jobs)
        assert len({j.worker for j in jobs if j is not None}) >= 1
        assert (await store.count())[0] == 6
    with pytest.raises(ValueError, match="path separators"):
        await queue.submit([JobFile("../etc/passwd", b"x")])
