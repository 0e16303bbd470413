"""What the job worker (`tools.jobs.worker`) and the job routes need of a job queue: the `JobQueue` protocol.

`tools.store.jobs.PostgresJobQueue` implements it over Postgres (jobs shared by every process on the database);
`tools.in_memory_jobs.InMemoryJobQueue` keeps the worker's own logic testable without a server, and one contract
suite (`tests/contracts/test_job_queue.py`) holds both to the same behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tools.records import DEFAULT_MAX_ATTEMPTS, Job, JobFile, JobOutcome, JobProgress
from tools.scope import DEFAULT_COLLECTION, check_collection

ABANDONED = "its worker stopped while running it %s times (a file may crash the process); not retried"
"""The error of a job failed after `max_attempts` claims whose worker died (%s: the claims)."""


def check_upload(files: list[JobFile], collection: str) -> None:
    """Check an upload job before it is queued.

    Raises:
        ValueError: no files, a file name that is blank or holds a path separator, or an invalid collection name
            (`tools.scope.ScopeError`).
    """
    check_collection(collection)
    if not files:
        raise ValueError("a job needs at least one file")
    for f in files:
        if not f.name.strip() or "/" in f.name or "\\" in f.name or f.name in (".", ".."):
            raise ValueError(f"file name {f.name!r}: expected a plain name without path separators")


def check_sync(params: dict[str, Any], collection: str) -> None:
    """Check a sync job before it is queued.

    Raises:
        ValueError: no path, or an invalid collection name (`tools.scope.ScopeError`).
    """
    check_collection(collection)
    if not str(params.get("path") or "").strip():
        raise ValueError("a sync job needs the folder's path")


JobGroups = Sequence[str] | None
"""The groups allowed to read an upload job's documents (`tools.ingest.groups`); None: their own metadata decides."""


def upload_params(groups: JobGroups) -> dict[str, Any]:
    """The `params` of an upload job: `{"groups": [...]}` when its documents' groups were given, else `{}`."""
    return {} if groups is None else {"groups": list(groups)}


class JobQueue(Protocol):
    """Ingestion jobs: queued, claimed by one worker at a time under a lease, their progress recorded, finished.

    A claim is fenced: every write of a claim (`heartbeat`, `progress`, `finish`) names the worker and the attempt
    number the claim gave (`Job.attempts`) and reports whether it was written, so a worker that lost its lease learns
    it at its next write and never writes over the claim that replaced it. A job whose lease expired is claimable
    again (a new attempt) until it was claimed `max_attempts` times; then it is failed instead. A finished job keeps
    its state, not its uploaded bytes. Jobs are read only within the collections asked for.

    Every method raises `tools.store.StoreError` on failure (`StoreUnavailableError` while the store is down:
    retryable), with nothing half-written.
    """

    async def setup(self) -> None:
        """Make the queue ready (idempotent)."""
        ...

    async def submit(
        self, files: list[JobFile], prefix: str = "", collection: str = DEFAULT_COLLECTION, groups: JobGroups = None
    ) -> int:
        """Queue a job ingesting `files` into `collection` (document ids: `prefix` + file name), readable by `groups`
        (None: each document's own metadata decides; kept in the job's `params` as `groups`); returns its id.

        Raises:
            ValueError: no files, a file name that is blank or holds a path separator, or an invalid collection.
        """
        ...

    async def submit_sync(self, params: dict[str, Any], collection: str = DEFAULT_COLLECTION) -> int:
        """Queue a job syncing the folder `params["path"]` into `collection`; returns its id.

        Raises:
            ValueError: no path, or an invalid collection.
        """
        ...

    async def claim(self, worker: str, lease_s: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Job | None:
        """The oldest claimable job (queued, or running with an expired lease and fewer than `max_attempts` claims),
        now running for `worker` under a lease of `lease_s` seconds and a new attempt number; None when there is
        none. A job whose lease expired after `max_attempts` claims is failed instead, with an error saying so."""
        ...

    async def heartbeat(self, job_id: int, worker: str, lease_s: float, *, attempt: int) -> bool:
        """Renew the lease of `worker`'s claim `attempt` for `lease_s` seconds; False when the claim is gone."""
        ...

    async def files(self, job_id: int) -> list[JobFile]:
        """The files of job `job_id`, in upload order (none once it ended)."""
        ...

    async def progress(self, job_id: int, worker: str, done: JobProgress, *, attempt: int) -> bool:
        """Record the progress `done` of `worker`'s claim `attempt` (its `files_total` only when given); False
        (nothing written) when the claim is gone."""
        ...

    async def finish(self, job_id: int, worker: str, outcome: JobOutcome, *, attempt: int) -> bool:
        """Mark the job `done` or `failed` with its `timings` and `result` (`outcome`) and drop its uploaded bytes,
        if it is still `worker`'s claim `attempt`; False (nothing written) otherwise."""
        ...

    async def document_chunks(self, doc_id: str, collection: str = DEFAULT_COLLECTION) -> int:
        """Chunks stored for document `doc_id` of `collection` (0 when it is not stored there)."""
        ...

    async def get(self, job_id: int, collections: Sequence[str] | None = None) -> Job | None:
        """Job `job_id` when it ingests into one of `collections` (None: any), else None."""
        ...

    async def list(self, limit: int = 50, collections: Sequence[str] | None = None) -> list[Job]:
        """The `limit` most recent jobs ingesting into `collections` (None: any), newest first."""
        ...
