"""The job worker's own logic over the in-memory doubles (fast tier, no server): the queue, the sink, the sync
ledger and the originals held in memory, a scripted embedder. An upload job ingests its files one at a time, lists a
file that fails and keeps the others' originals; a sync job runs the sync of its folder and records its summary, and
fails outside the worker's `SYNC_ROOTS`; a worker that lost its lease stops before its next file and writes nothing
more; worker loops sharing a queue run each job once. What only Postgres shows (a worker process killed mid-job, a
Postgres restart, the migration of old jobs tables) stays in the stack tests beside this file."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from tests.document_files import zip_named
from tests.ingest_doubles import ScriptedEmbedder
from tools.errors import StoreBusyError
from tools.in_memory_jobs import InMemoryJobQueue
from tools.in_memory_originals import InMemoryOriginals
from tools.in_memory_sink import InMemorySink
from tools.in_memory_sync import InMemorySyncLedger
from tools.ingest import IngestOptions, ingest
from tools.jobs import worker
from tools.jobs.worker import JobHook
from tools.records import Job, JobFile


class Doubles:
    """The queue, sink, ledger and originals of one test."""

    def __init__(self) -> None:
        self.embedder = ScriptedEmbedder()
        self.sink = InMemorySink(self.embedder.spec.dim)
        self.ledger = InMemorySyncLedger(self.sink)
        self.queue = InMemoryJobQueue(self.sink)
        self.originals = InMemoryOriginals()

    async def run(
        self, job: Job, options: IngestOptions, *, sync_roots: Sequence[Path] = (), after_file: JobHook | None = None
    ) -> Job | None:
        """`worker.run_job` of the claimed `job` as worker `w` over the doubles."""
        return await worker.run_job(
            job,
            self.queue,
            self.embedder,
            self.sink,
            self.ledger,
            worker=job.worker or "w",
            options=options,
            lease_s=600,
            originals=self.originals,
            sync_roots=sync_roots,
            after_file=after_file,
        )


@pytest.fixture
def doubles() -> Doubles:
    return Doubles()


async def test_an_upload_job_ingests_each_file_and_lists_the_one_that_fails(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    zip_named(tmp_path / "archive.pdf")
    files = [
        JobFile("notes.md", b"# Notes\n\n## Backups\n\nThe narwhal backup job runs every night at two.\n"),
        JobFile("archive.pdf", (tmp_path / "archive.pdf").read_bytes()),  # a ZIP named .pdf: refused
        JobFile("readme.txt", b"Read me: the okapi gateway listens on port 8080.\n"),
    ]
    job_id = await doubles.queue.submit(files, "up/", "kb")
    job = await doubles.queue.claim("w", 600)
    assert job is not None
    done = await doubles.run(job, ingest_options(settings))
    assert done is not None and (done.status, done.files_done, done.files_total) == ("done", 3, 3)
    assert [e["file"] for e in done.errors] == ["archive.pdf"] and "archive.pdf" in done.errors[0]["error"]
    stored = {d: doc for (c, d), doc in doubles.sink.documents.items() if c == "kb"}
    assert sorted(stored) == ["up/notes.md", "up/readme.txt"]
    assert done.chunks == sum(len(doc.chunks) for doc in stored.values()) > 0
    assert doubles.originals.read("kb", "up/notes.md") == files[0].data
    assert doubles.originals.read("kb", "up/archive.pdf") is None
    assert done.timings["wall_s"] >= 0 and done.finished_at is not None and done.id == job_id
    assert await doubles.queue.files(job_id) == []


async def test_a_sync_job_runs_the_sync_and_records_its_summary(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    (tmp_path / "a.md").write_text("# Alpha\n\nThe narwhal backup job runs every night at two.\n")
    (tmp_path / "b.txt").write_text("The okapi gateway listens on port 8080.\n")
    job_id = await doubles.queue.submit_sync({"path": str(tmp_path), "exclude": ["*.txt"]}, "kb")
    job = await doubles.queue.claim("w", 30.0)
    assert job is not None and job.id == job_id and job.kind == "sync"
    done = await doubles.run(job, ingest_options(settings), sync_roots=[tmp_path])
    assert done is not None and done.status == "done", done
    assert done.result is not None and done.result["added"] == ["a.md"] and done.result["embed_calls"] == 1
    assert (done.files_done, done.files_total, done.errors) == (1, 1, [])
    assert set(await doubles.sink.stored_versions(["a.md", "b.txt"], "kb")) == {"a.md"}
    assert doubles.originals.read("kb", "a.md") == (tmp_path / "a.md").read_bytes()


async def test_a_sync_job_outside_the_workers_sync_roots_fails(
    tmp_path: Path, doubles: Doubles, settings: Settings
) -> None:
    """The worker checks the job's folder against its own `SYNC_ROOTS` when it runs the job (they may have changed
    since it was queued): outside them, or none set, the job fails saying so and nothing is synced."""
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (other / "a.md").write_text("# Alpha\n\nNot to be synced.\n")
    for roots in ([allowed], []):
        await doubles.queue.submit_sync({"path": str(other)}, "kb")
        job = await doubles.queue.claim("w", 30.0)
        assert job is not None
        done = await doubles.run(job, ingest_options(settings), sync_roots=roots)
        assert done is not None and done.status == "failed"
        assert "SYNC_ROOTS" in done.errors[-1]["error"] and str(other) in done.errors[-1]["error"]
    assert await doubles.sink.stored_versions(["a.md"], "kb") == {}


async def test_a_worker_that_lost_its_lease_stops_and_writes_nothing_more(doubles: Doubles, settings: Settings) -> None:
    queue = doubles.queue
    files = [JobFile(f"note{i}.txt", f"Note {i}: vitamin B12 lowers homocysteine.".encode()) for i in range(3)]
    job_id = await queue.submit(files)
    claimed = await queue.claim("A", 600)
    assert claimed is not None and claimed.attempts == 1
    taken: list[Job] = []

    async def paused_after_first_file(job: Job, done: int) -> None:
        if done == 1:  # A pauses past its lease; B claims the job
            queue.leases[job.id] = queue.clock() - 1.0
            again = await queue.claim("B", 600)
            assert again is not None and again.id == job.id
            taken.append(again)

    await doubles.run(claimed, ingest_options(settings), after_file=paused_after_first_file)
    stored = sorted(d for _, d in doubles.sink.documents)
    assert stored == ["note0.txt"]  # A stopped at once: the other files are B's to ingest, once
    state = await queue.get(job_id)
    assert state is not None and taken
    assert (state.status, state.worker, state.attempts, state.files_done) == ("running", "B", 2, 0)
    assert state.finished_at is None and state.errors == []


async def test_worker_loops_sharing_a_queue_run_each_job_once(doubles: Doubles, settings: Settings) -> None:
    queue = doubles.queue
    ids = [
        await queue.submit([JobFile(f"doc{i}.md", f"# Doc {i}\n\nAbout otters, part {i}.\n".encode())])
        for i in range(4)
    ]
    stop = asyncio.Event()
    ran: list[tuple[int, str]] = []

    async def after_file(job: Job, done: int) -> None:
        ran.append((job.id, job.worker or ""))
        if len(ran) == len(ids):
            stop.set()

    loops = [
        worker.work(
            queue,
            doubles.embedder,
            doubles.sink,
            doubles.ledger,
            options=ingest_options(settings),
            lease_s=600,
            poll_s=0.01,
            stop=stop,
            worker=f"w{i}",
            after_file=after_file,
        )
        for i in range(2)
    ]
    async with asyncio.timeout(120):
        await asyncio.gather(*loops)
    assert sorted(i for i, _ in ran) == ids
    jobs = [await queue.get(i) for i in ids]
    assert all(j is not None and (j.status, j.attempts) == ("done", 1) for j in jobs), jobs
    assert sorted(d for _, d in doubles.sink.documents) == [f"doc{i}.md" for i in range(4)]


async def test_a_run_that_meets_a_busy_store_is_not_failed_but_claimed_again(
    doubles: Doubles, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pooled connection busy (or Postgres restarting) is not the job's fault: the run stops unrecorded, the
    job stays running until its lease expires, and the next claim runs it to the end."""
    job_id = await doubles.queue.submit([JobFile("notes.md", b"# Notes\n\nThe narwhal backup runs at two.\n")])
    job = await doubles.queue.claim("w", 600)
    assert job is not None
    real_ingest = ingest

    async def busy(*args: Any, **kwargs: Any) -> Any:
        raise StoreBusyError("no pooled connection free within DB_ACQUIRE_TIMEOUT_S=5")

    monkeypatch.setattr(worker, "ingest", busy)
    with pytest.raises(StoreBusyError):
        await doubles.run(job, ingest_options(settings))
    kept = await doubles.queue.get(job_id)
    assert kept is not None and kept.status == "running" and kept.errors == []
    assert await doubles.queue.claim("w2", 600) is None  # its lease still holds
    monkeypatch.setattr(worker, "ingest", real_ingest)
    later = time.time() + 601
    doubles.queue.clock = lambda: later  # the lease has expired
    again = await doubles.queue.claim("w2", 600)
    assert again is not None and again.id == job_id and again.attempts == 2
    done = await doubles.run(again, ingest_options(settings))
    assert done is not None and done.status == "done" and done.errors == []
