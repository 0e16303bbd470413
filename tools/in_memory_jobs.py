"""A job queue held in memory: the `tools.jobs.ports.JobQueue` of Postgres, with no server. For the job worker's own
logic in the fast tier (runs, progress, errors, lost leases, sync jobs); the contract suite
(`tests/contracts/test_job_queue.py`) holds it to `tools.store.jobs.PostgresJobQueue`'s behaviour.

Semantics are Postgres': jobs claimed oldest first, each claim a new attempt under a lease read from `clock`; every
write of a claim fenced by the worker and the attempt; a job whose lease expired claimable again until it was
claimed `max_attempts` times, then failed; a finished job keeps its state, not its files.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tools.in_memory_sink import InMemorySink
from tools.jobs.ports import ABANDONED, JobGroups, check_sync, check_upload, upload_params
from tools.records import DEFAULT_MAX_ATTEMPTS, Job, JobFile, JobOutcome, JobProgress
from tools.scope import DEFAULT_COLLECTION


@dataclass
class InMemoryJobQueue:
    """Jobs in a dict; safe within one event loop (no method awaits).

    Attributes:
        sink: where the jobs' documents are stored (`document_chunks` counts its chunks; None: every count is 0).
        clock: seconds (e.g. `time.time`, or a test's own clock); a lease runs out when the clock passes it.
        jobs: every job by id; leases: the lease end (clock seconds) of each running job; uploads: the files of
            each job not yet ended.
    """

    sink: InMemorySink | None = None
    clock: Callable[[], float] = time.time
    jobs: dict[int, Job] = field(default_factory=dict)
    leases: dict[int, float] = field(default_factory=dict)
    uploads: dict[int, list[JobFile]] = field(default_factory=dict)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _queue(self, files: list[JobFile], prefix: str, collection: str, kind: str, params: dict[str, Any]) -> int:
        job_id = max(self.jobs, default=0) + 1
        self.jobs[job_id] = Job(
            job_id,
            "queued",
            self._now(),
            None,
            None,
            None,
            0,
            prefix,
            collection,
            len(files),
            0,
            0,
            kind="sync" if kind == "sync" else "upload",
            params=copy.deepcopy(params),
        )
        self.uploads[job_id] = list(files)
        return job_id

    async def setup(self) -> None:
        """Nothing to make."""

    async def submit(
        self, files: list[JobFile], prefix: str = "", collection: str = DEFAULT_COLLECTION, groups: JobGroups = None
    ) -> int:
        """Queue an upload job; its id (see `tools.jobs.ports.JobQueue.submit`).

        Raises:
            ValueError: as `tools.store.jobs.check_upload`.
        """
        check_upload(files, collection)
        return self._queue(files, prefix, collection, "upload", upload_params(groups))

    async def submit_sync(self, params: dict[str, Any], collection: str = DEFAULT_COLLECTION) -> int:
        """Queue a sync job; its id.

        Raises:
            ValueError: as `tools.store.jobs.check_sync`.
        """
        check_sync(params, collection)
        return self._queue([], str(params.get("prefix") or ""), collection, "sync", params)

    def _expired(self, job: Job, now: float) -> bool:
        return job.status == "running" and self.leases.get(job.id, now) < now

    async def claim(self, worker: str, lease_s: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Job | None:
        """The oldest claimable job, now `worker`'s under a new lease and attempt; None when none."""
        now = self.clock()
        for job in list(self.jobs.values()):
            if self._expired(job, now) and job.attempts >= max_attempts:
                errors = [*job.errors, {"file": "", "error": ABANDONED % job.attempts}]
                self.jobs[job.id] = replace(job, status="failed", finished_at=self._now(), errors=errors)
                self._end(job.id)
        for job_id in sorted(self.jobs):
            job = self.jobs[job_id]
            if job.status == "queued" or (self._expired(job, now) and job.attempts < max_attempts):
                claimed = replace(
                    job,
                    status="running",
                    worker=worker,
                    attempts=job.attempts + 1,
                    started_at=self._now(),
                    files_done=0,
                    chunks=0,
                    errors=[],
                )
                self.jobs[job_id] = claimed
                self.leases[job_id] = now + lease_s
                return copy.deepcopy(claimed)
        return None

    def _claimed(self, job_id: int, worker: str, attempt: int) -> Job | None:
        """Job `job_id` when it is still `worker`'s claim `attempt`."""
        job = self.jobs.get(job_id)
        if job is None or job.worker != worker or job.attempts != attempt or job.status != "running":
            return None
        return job

    def _end(self, job_id: int) -> None:
        self.leases.pop(job_id, None)
        self.uploads.pop(job_id, None)

    async def heartbeat(self, job_id: int, worker: str, lease_s: float, *, attempt: int) -> bool:
        """Renew the claim's lease; False when the claim is gone."""
        if self._claimed(job_id, worker, attempt) is None:
            return False
        self.leases[job_id] = self.clock() + lease_s
        return True

    async def files(self, job_id: int) -> list[JobFile]:
        """The job's files in upload order (none once it ended)."""
        return list(self.uploads.get(job_id, []))

    async def progress(self, job_id: int, worker: str, done: JobProgress, *, attempt: int) -> bool:
        """Record the claim's progress; False when the claim is gone."""
        job = self._claimed(job_id, worker, attempt)
        if job is None:
            return False
        total = job.files_total if done.files_total is None else done.files_total
        self.jobs[job_id] = replace(
            job, files_done=done.files_done, chunks=done.chunks, errors=copy.deepcopy(done.errors), files_total=total
        )
        return True

    async def finish(self, job_id: int, worker: str, outcome: JobOutcome, *, attempt: int) -> bool:
        """End the claim's job with `status`, `timings` and `result`, its files dropped; False when the claim is
        gone."""
        job = self._claimed(job_id, worker, attempt)
        if job is None:
            return False
        self.jobs[job_id] = replace(
            job,
            status=outcome.status,
            finished_at=self._now(),
            timings=dict(outcome.timings),
            result=copy.deepcopy(outcome.result),
        )
        self._end(job_id)
        return True

    async def document_chunks(self, doc_id: str, collection: str = DEFAULT_COLLECTION) -> int:
        """Chunks the sink holds for (`collection`, `doc_id`)."""
        doc = None if self.sink is None else self.sink.documents.get((collection, doc_id))
        return 0 if doc is None else len(doc.chunks)

    async def get(self, job_id: int, collections: Sequence[str] | None = None) -> Job | None:
        """Job `job_id` within `collections` (None: any), else None."""
        job = self.jobs.get(job_id)
        if job is None or (collections is not None and job.collection not in collections):
            return None
        return copy.deepcopy(job)

    async def list(self, limit: int = 50, collections: Sequence[str] | None = None) -> list[Job]:
        """The `limit` newest jobs within `collections` (None: any)."""
        jobs = [j for _, j in sorted(self.jobs.items(), reverse=True)]
        return [copy.deepcopy(j) for j in jobs if collections is None or j.collection in collections][:limit]
