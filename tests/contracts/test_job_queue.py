"""`tools.jobs.ports.JobQueue`: the in-memory queue and Postgres' jobs table answer alike (jobs claimed once, oldest
first; a lease run out makes a job claimable again under a new attempt and fences the old claim's writes; a job
abandoned `max_attempts` times is failed; progress and the finish are recorded, the uploaded bytes dropped; jobs
read within collections)."""

from __future__ import annotations

import pytest

from tests.contracts.ports import expire_lease
from tools.jobs.ports import JobQueue
from tools.records import JobFile, JobOutcome, JobProgress

FILES = [JobFile("a.txt", b"Vitamin B12."), JobFile("b.md", b"# Folate\n\nLeafy greens.\n")]


async def test_a_job_is_claimed_once_oldest_first(job_queue: JobQueue) -> None:
    first = await job_queue.submit(FILES, "up/", "kb")
    second = await job_queue.submit_sync({"path": "/data/folder", "prefix": "docs/", "include": ["*.md"]})
    queued = await job_queue.get(first)
    assert queued is not None and (queued.status, queued.attempts, queued.files_total) == ("queued", 0, 2)
    assert (queued.kind, queued.prefix, queued.collection, queued.worker) == ("upload", "up/", "kb", None)
    assert await job_queue.files(first) == FILES
    a = await job_queue.claim("A", 600)
    b = await job_queue.claim("B", 600)
    assert await job_queue.claim("C", 600) is None
    assert a is not None and (a.id, a.status, a.worker, a.attempts) == (first, "running", "A", 1)
    assert a.started_at is not None
    assert b is not None and (b.id, b.kind, b.prefix, b.collection) == (second, "sync", "docs/", "default")
    assert b.params == {"path": "/data/folder", "prefix": "docs/", "include": ["*.md"]} and b.files_total == 0


async def test_an_expired_lease_is_claimable_again_and_fences_the_old_claim(job_queue: JobQueue) -> None:
    job_id = await job_queue.submit(FILES)
    a = await job_queue.claim("A", 600)
    assert a is not None and await job_queue.heartbeat(job_id, "A", 600, attempt=a.attempts)
    assert await job_queue.claim("B", 600) is None  # a live lease: not claimable
    await expire_lease(job_queue, job_id)
    b = await job_queue.claim("B", 600)
    assert b is not None and (b.id, b.worker, b.attempts) == (job_id, "B", 2)
    assert not await job_queue.heartbeat(job_id, "A", 600, attempt=1)
    assert not await job_queue.progress(job_id, "B", JobProgress(2, 5, []), attempt=1)  # the same name, a stale attempt
    assert not await job_queue.finish(job_id, "A", JobOutcome("done", {}), attempt=1)
    assert await job_queue.progress(job_id, "B", JobProgress(1, 3, [{"file": "b.md", "error": "bad"}]), attempt=2)
    state = await job_queue.get(job_id)
    assert state is not None and (state.status, state.worker, state.files_done, state.chunks) == ("running", "B", 1, 3)
    assert state.errors == [{"file": "b.md", "error": "bad"}] and state.finished_at is None


async def test_a_job_whose_worker_keeps_dying_is_failed_after_max_attempts(job_queue: JobQueue) -> None:
    job_id = await job_queue.submit([JobFile("crash.pdf", b"%PDF-1.7 crashes the reader")])
    for attempt in (1, 2, 3):
        claimed = await job_queue.claim(f"w{attempt}", 600, max_attempts=3)
        assert claimed is not None and claimed.attempts == attempt
        await expire_lease(job_queue, job_id)  # its worker died mid-file: nobody renews the lease
    assert await job_queue.claim("w4", 600, max_attempts=3) is None
    state = await job_queue.get(job_id)
    assert state is not None and state.status == "failed" and state.finished_at is not None
    assert "3 times" in state.errors[-1]["error"] and state.errors[-1]["file"] == ""
    assert await job_queue.files(job_id) == []


async def test_finish_records_the_outcome_and_drops_the_uploaded_bytes(job_queue: JobQueue) -> None:
    job_id = await job_queue.submit(FILES)
    claimed = await job_queue.claim("A", 600)
    assert claimed is not None
    assert await job_queue.progress(job_id, "A", JobProgress(2, 7, [], files_total=2), attempt=1)
    result = {"added": ["a.txt"], "moved": [{"from": "x", "to": "y"}]}
    assert await job_queue.finish(job_id, "A", JobOutcome("done", {"wall_s": 1.5}, result), attempt=1)
    assert not await job_queue.finish(job_id, "A", JobOutcome("failed", {}), attempt=1)  # ended: no claim left
    assert not await job_queue.heartbeat(job_id, "A", 600, attempt=1)
    state = await job_queue.get(job_id)
    assert state is not None and (state.status, state.files_done, state.chunks) == ("done", 2, 7)
    assert (state.timings, state.result) == ({"wall_s": 1.5}, result) and state.finished_at is not None
    assert await job_queue.files(job_id) == []
    assert await job_queue.claim("B", 600) is None


async def test_jobs_are_read_within_the_collections_asked_for(job_queue: JobQueue) -> None:
    ids = [await job_queue.submit(FILES, collection=c) for c in ("kb", "hr", "kb")]
    assert await job_queue.get(ids[1], ["kb"]) is None
    assert await job_queue.get(ids[1], ["hr", "kb"]) is not None
    assert await job_queue.get(10_000) is None
    assert [j.id for j in await job_queue.list()] == ids[::-1]
    assert [j.id for j in await job_queue.list(collections=["kb"])] == [ids[2], ids[0]]
    assert [j.id for j in await job_queue.list(1, ["kb"])] == [ids[2]]
    assert await job_queue.document_chunks("a.txt", "kb") == 0


@pytest.mark.parametrize(
    "files",
    [[], [JobFile("", b"x")], [JobFile("a/b.txt", b"x")], [JobFile("..", b"x")], [JobFile("a\\b.txt", b"x")]],
    ids=["none", "blank", "slash", "dots", "backslash"],
)
async def test_a_job_that_could_not_run_is_refused(job_queue: JobQueue, files: list[JobFile]) -> None:
    with pytest.raises(ValueError):
        await job_queue.submit(files)
    with pytest.raises(ValueError):
        await job_queue.submit_sync({"path": " "})
    with pytest.raises(ValueError):
        await job_queue.submit(FILES, collection="Not A Collection!")
    assert await job_queue.list() == []


async def test_an_upload_keeps_the_groups_of_its_documents(job_queue: JobQueue) -> None:
    tagged = await job_queue.submit(FILES, "", "kb", ("eng", "hr"))
    plain = await job_queue.submit(FILES, "", "kb")
    claimed = await job_queue.claim("A", 600)
    assert claimed is not None and (claimed.id, claimed.params) == (tagged, {"groups": ["eng", "hr"]})
    other = await job_queue.get(plain)
    assert other is not None and other.params == {}
