"""The jobs path while Postgres is down, without servers: the job routes answer the JSON 503 `postgres_unavailable`
with `Retry-After` (the jobs queue over a real asyncpg pool whose Postgres socket does not exist), and the job worker
waits out an unavailable store with its backoff, keeps polling, runs jobs again afterwards and stops cleanly when told
to, and a job's lease keeper outlives a failed renewal (the queue and the job run are doubles; the backoff is a
recording tenacity wait)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import asyncpg
import pytest
from tenacity import RetryCallState
from tenacity.wait import wait_base

from agent.http.jobs import get_jobs
from tests.http_rig import assert_error, serve
from tools.embedder import TritonEmbedder
from tools.errors import StoreQueryError, StoreUnavailableError
from tools.ingest import IngestOptions
from tools.ingest.ports import SyncLedger
from tools.jobs import worker
from tools.jobs.ports import JobQueue
from tools.records import Job, JobFile, JobOutcome
from tools.store import VectorStore
from tools.store.jobs import PostgresJobQueue


@pytest.fixture
async def gone_queue(tmp_path: Path) -> AsyncIterator[PostgresJobQueue]:
    """A jobs queue over a real asyncpg pool whose Postgres socket folder does not exist (as while the embedded
    Postgres restarts): every connection attempt fails at once."""
    pool = await asyncpg.create_pool(f"postgresql://postgres@/postgres?host={tmp_path / 'gone'}", min_size=0)
    try:
        yield PostgresJobQueue(pool, acquire_timeout_s=5)
    finally:
        await pool.close()


async def test_job_routes_answer_503_with_retry_after_while_postgres_is_down(gone_queue: PostgresJobQueue) -> None:
    served = serve()
    served.app.dependency_overrides[get_jobs] = lambda: gone_queue
    async with served.client() as client:
        responses = {
            "list": await client.get("/v1/jobs"),
            "get": await client.get("/v1/jobs/7"),
            "upload": await client.post("/v1/documents/files", files={"files": ("note.txt", b"Vitamin B12.")}),
        }
    for route, response in responses.items():
        assert_error(response, 503, "postgres_unavailable", "Postgres is unreachable")
        assert int(response.headers["retry-after"]) > 0, route


class RecordingWait(wait_base):
    """A tenacity wait of 0 s that records the try number of every wait it was asked for."""

    def __init__(self) -> None:
        self.tries: list[int] = []

    def __call__(self, retry_state: RetryCallState) -> float:
        self.tries.append(retry_state.attempt_number)
        return 0.0


def a_job(job_id: int) -> Job:
    now = datetime.now(UTC)
    return Job(job_id, "running", now, now, None, "w", 1, "", "default", 1, 0, 0)


class FlakyQueue:
    """The part of `JobQueue` the worker loop calls, as a script: `setup` and each `claim` take the next step of
    `steps` (an exception is raised, a job or None returned); when the script is done, `stop` is set and claims
    return None."""

    def __init__(self, steps: list[BaseException | Job | None], stop: asyncio.Event) -> None:
        self.steps = steps
        self.stop = stop
        self.calls: list[str] = []

    def _next(self, name: str) -> Job | None:
        self.calls.append(name)
        if not self.steps:
            self.stop.set()
            return None
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    async def setup(self) -> None:
        self._next("setup")

    async def claim(self, worker: str, lease_s: float, max_attempts: int = 3) -> Job | None:
        return self._next("claim")


async def run_worker(
    queue: FlakyQueue, stop: asyncio.Event, backoff: wait_base, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """`worker.work` over `queue` until `stop` is set; the ids of the jobs it ran (`run_job` is a double that raises
    `StoreUnavailableError` for job 13, as when Postgres goes away mid-run)."""
    ran: list[int] = []

    async def fake_run_job(job: Job, *args: Any, **kwargs: Any) -> Job:
        ran.append(job.id)
        if job.id == 13:
            raise StoreUnavailableError("recording a job's progress: Postgres is unreachable")
        return job

    monkeypatch.setattr(worker, "run_job", fake_run_job)
    await work(queue, stop, backoff)
    return ran


async def work(queue: object, stop: asyncio.Event, backoff: wait_base) -> None:
    """`worker.work` over the double `queue` (no embedder, no store: the doubles never reach them), polling at once."""
    await worker.work(
        cast(JobQueue, queue),
        cast(TritonEmbedder, None),
        cast(VectorStore, None),
        cast(SyncLedger, None),
        options=IngestOptions(chunk_tokens=200, overlap_tokens=20, max_file_bytes=1000),
        lease_s=30,
        poll_s=0,
        stop=stop,
        worker="w",
        backoff=backoff,
    )


def down() -> StoreUnavailableError:
    return StoreUnavailableError("claiming a job: Postgres is unreachable, restarting or shutting down")


async def test_the_worker_backs_off_while_the_store_is_unavailable_then_runs_jobs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stop = asyncio.Event()
    queue = FlakyQueue([down(), None, down(), down(), down(), a_job(13), down(), a_job(14)], stop)
    wait = RecordingWait()
    with caplog.at_level(logging.WARNING, logger=worker.__name__):
        ran = await run_worker(queue, stop, wait, monkeypatch)
    assert ran == [13, 14]  # the job whose run lost the store did not end the worker
    assert queue.calls == ["setup"] * 2 + ["claim"] * 7  # the set-up and the claims tried again after each failure
    assert wait.tries == [1, 1, 2, 3, 1]  # the backoff grows with consecutive failures, and starts over after a success
    messages = [r.getMessage() for r in caplog.records]
    assert sum("the store is unavailable" in m for m in messages) == 5
    assert any("job 13: the store became unavailable" in m for m in messages)


async def test_a_stop_ends_the_backoff_wait_at_once() -> None:
    stop = asyncio.Event()
    failed = asyncio.Event()

    class Down:
        claims = 0

        async def setup(self) -> None:
            return None

        async def claim(self, worker: str, lease_s: float, max_attempts: int = 3) -> Job | None:
            self.claims += 1
            failed.set()
            raise down()

    class HourLong(wait_base):
        def __call__(self, retry_state: RetryCallState) -> float:
            return 3600.0

    queue = Down()
    task = asyncio.create_task(work(queue, stop, HourLong()))
    try:
        await failed.wait()
        stop.set()
        await asyncio.wait_for(task, 60)  # a bound for a loaded machine: the wait it cuts is an hour
    finally:
        task.cancel()
    assert queue.claims == 1 and task.result() is None


@pytest.mark.parametrize("failure", [StoreQueryError("relation ingest_jobs does not exist"), KeyError("bug")])
async def test_the_worker_does_not_retry_other_failures(failure: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = asyncio.Event()
    wait = RecordingWait()
    with pytest.raises(type(failure)):
        await run_worker(FlakyQueue([None, failure], stop), stop, wait, monkeypatch)
    assert wait.tries == []


def test_the_default_backoff_grows_and_is_capped() -> None:
    """`STORE_BACKOFF` for tries 1, 2, ..., 12: from 0.5 s (plus jitter) doubling, never over its cap."""

    def wait_of(attempt: int) -> float:
        state = RetryCallState(cast(Any, None), cast(Callable[..., Any], print), (), {})
        state.attempt_number = attempt
        return worker.STORE_BACKOFF(state)

    waits = [wait_of(n) for n in range(1, 13)]
    assert 0.5 <= waits[0] <= 1.0 and 4.0 <= waits[3] <= 4.5
    assert all(0 < w <= 10.0 for w in waits) and waits[-1] == 10.0


class LeaseQueue:
    """The part of the `JobQueue` port one job's run calls, as a double: two files; while `down`, a lease renewal raises
    `StoreUnavailableError` (and sets `raised`); `finished` records the job's final status."""

    def __init__(self) -> None:
        self.down = False
        self.raised = asyncio.Event()
        self.finished: list[str] = []

    async def files(self, job_id: int) -> list[JobFile]:
        return [JobFile("a.txt", b"Vitamin B12."), JobFile("b.txt", b"Homocysteine.")]

    async def heartbeat(self, job_id: int, worker: str, lease_s: float, *, attempt: int) -> bool:
        if self.down:
            self.raised.set()
            raise down()
        return True

    async def progress(self, *args: Any, **kwargs: Any) -> bool:
        return True

    async def finish(self, job_id: int, worker: str, outcome: JobOutcome, *, attempt: int) -> bool:
        self.finished.append(outcome.status)
        return True

    async def document_chunks(self, doc_id: str, collection: str = "default") -> int:
        return 1

    async def get(self, job_id: int, collections: Any = None) -> Job | None:
        return None


async def test_a_lease_renewal_that_meets_an_outage_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease keeper outlives a failed renewal: the run goes on to its second file (a dead keeper reads as a lost
    lease) and finishes the job."""
    queue = LeaseQueue()
    ingested: list[str] = []

    async def fake_ingest(inputs: list[Any], *args: Any, **kwargs: Any) -> SimpleNamespace:
        ingested.append(Path(inputs[0].doc_id).name)
        if len(ingested) == 1:  # the store goes away while the first file is ingested, until a renewal met it
            queue.down = True
            await queue.raised.wait()
            queue.down = False
        return SimpleNamespace(chunks=1, file_errors=[], failed=[])

    monkeypatch.setattr(worker, "ingest", fake_ingest)
    with caplog.at_level(logging.WARNING, logger=worker.__name__):
        await worker.run_job(
            a_job(21),
            cast(JobQueue, queue),
            cast(TritonEmbedder, None),
            cast(VectorStore, None),
            cast(SyncLedger, None),
            worker="w",
            options=IngestOptions(chunk_tokens=200, overlap_tokens=20, max_file_bytes=1000),
            lease_s=0.03,
        )
    assert ingested == ["a.txt", "b.txt"] and queue.finished == ["done"]
    assert any("job 21: renewing the lease failed" in r.getMessage() for r in caplog.records)
