"""The jobs table and its statements, over the store's asyncpg pool: every operation is one transaction
(`tools.store.pools.transaction`, bounded acquire), and Postgres' failures come out as the store's errors
(`StoreUnavailableError` while Postgres is down or restarting, `StoreBusyError`, `StoreQueryError`), never asyncpg's.

Schema (created idempotently by `PostgresJobQueue.setup`):
- `ingest_jobs(id, status, created_at, started_at, finished_at, lease_until, worker, attempts, prefix, collection,
  files_total, files_done, chunks, errors jsonb, timings jsonb)`; `collection` is where the job's documents go
  (`tools.scope`), and jobs are listed and read only within the collections asked for; status is `queued`,
  `running`, `done` or `failed`;
- `kind` (`upload` by default: the rows of earlier versions), `params jsonb` (a sync job's folder and globs) and
  `result jsonb` (a sync job's summary), added to a table made by an earlier version when missing;
- `ingest_job_files(job_id -> ingest_jobs, idx, name, data bytea)`: the uploaded bytes, so that any worker (any
  process, any machine) can run any job and a job outlives the process that accepted it. They are deleted when the
  job ends (`finish`, or failed after `max_attempts` claims) in the same transaction, and `setup` deletes those of
  jobs that ended before this rule: a finished job keeps its row (status, counts, errors), not its bytes.

Claiming (`claim`): one statement picks the oldest job that is queued, or running with an expired lease (its worker
died), with `FOR UPDATE SKIP LOCKED`, so concurrent workers never take the same job, and marks it running under a new
lease of `lease_s` seconds and a new attempt number. A running worker renews the lease (`heartbeat`) more often than
it expires, and before each file. Every write of a claim (`heartbeat`, `progress`, `finish`) is fenced by the
worker's name and the attempt number and reports whether it was written: a worker that lost its lease while alive
(paused past it) learns so at its next write and stops, and never writes over the claim that replaced it. A job
claimed `max_attempts` times whose worker died each time is failed, not retried forever.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg

from tools.jobs.ports import ABANDONED, JobGroups, check_sync, check_upload, upload_params
from tools.records import DEFAULT_MAX_ATTEMPTS, Job, JobFile, JobOutcome, JobProgress
from tools.scope import DEFAULT_COLLECTION
from tools.store import pools
from tools.store.records import Conn

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS ingest_jobs (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    lease_until timestamptz,
    worker text,
    attempts integer NOT NULL DEFAULT 0,
    prefix text NOT NULL DEFAULT '',
    files_total integer NOT NULL,
    files_done integer NOT NULL DEFAULT 0,
    chunks integer NOT NULL DEFAULT 0,
    errors jsonb NOT NULL DEFAULT '[]',
    timings jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS ingest_jobs_claim ON ingest_jobs (id) WHERE status IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS ingest_job_files (
    job_id bigint NOT NULL REFERENCES ingest_jobs(id) ON DELETE CASCADE,
    idx integer NOT NULL,
    name text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (job_id, idx)
);
ALTER TABLE ingest_jobs ADD COLUMN IF NOT EXISTS collection text NOT NULL DEFAULT 'default';
ALTER TABLE ingest_jobs ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'upload';
ALTER TABLE ingest_jobs ADD COLUMN IF NOT EXISTS params jsonb NOT NULL DEFAULT '{}';
ALTER TABLE ingest_jobs ADD COLUMN IF NOT EXISTS result jsonb;
"""

_FENCED = "id = $1 AND worker = $2 AND attempts = $3 AND status = 'running'"
"""The condition of every write of a claim: job $1, still claimed by worker $2 under attempt $3 (the fencing token:
a worker that paused past its lease, or a process reusing its name, never writes over a later claim)."""

READ = "BEGIN READ ONLY"

_JOB_COLUMNS = (
    "id, status, created_at, started_at, finished_at, worker, attempts, prefix, collection, files_total, files_done, "
    "chunks, errors, timings, kind, params, result"
)


def _job(row: asyncpg.Record) -> Job:
    values = dict(row)
    values["errors"] = json.loads(values["errors"])
    values["timings"] = json.loads(values["timings"])
    values["params"] = json.loads(values["params"])
    values["result"] = json.loads(values["result"]) if values["result"] is not None else None
    return Job(**values)


class PostgresJobQueue:
    """Jobs in Postgres over an asyncpg pool (the store's; the `tools.jobs.ports.JobQueue` of Postgres), one
    transaction per operation.

    Args:
        pool: a connected asyncpg pool on the store's database.
        acquire_timeout_s: longest wait for a pooled connection, seconds (`DB_ACQUIRE_TIMEOUT_S`).

    Raises (every method): the store's errors: `StoreUnavailableError` (Postgres is down or restarting; retryable),
    `StoreBusyError` (no pooled connection within `acquire_timeout_s`; retryable), `StoreQueryError`.
    """

    def __init__(self, pool: asyncpg.Pool, acquire_timeout_s: float = 5.0) -> None:
        self.pool = pool
        self.acquire_timeout_s = acquire_timeout_s

    def _tx(self, action: str, begin: str = "BEGIN") -> AbstractAsyncContextManager[Conn]:
        return pools.transaction(self.pool, self.acquire_timeout_s, action, begin)

    async def _fenced(
        self, action: str, assignments: str, job_id: int, worker: str, attempt: int, *values: Any
    ) -> bool:
        """`UPDATE ingest_jobs SET <assignments>` (parameters $4... are `values`) of `worker`'s claim `attempt` on job
        `job_id` (`_FENCED`); whether the row was written."""
        async with self._tx(action) as conn:
            status = await conn.execute(
                f"UPDATE ingest_jobs SET {assignments} WHERE {_FENCED}", job_id, worker, attempt, *values
            )
        return status.endswith(" 1")

    async def setup(self) -> None:
        """Create the tables when missing (idempotent; concurrent callers serialised by an advisory lock)."""
        async with self._tx("creating the jobs tables") as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(4244)")
            await conn.execute(SCHEMA_SQL)
            await conn.execute(  # bytes of jobs that ended under an earlier version, which kept them
                "DELETE FROM ingest_job_files f USING ingest_jobs j "
                "WHERE f.job_id = j.id AND j.status IN ('done', 'failed')"
            )

    async def submit(
        self, files: list[JobFile], prefix: str = "", collection: str = DEFAULT_COLLECTION, groups: JobGroups = None
    ) -> int:
        """Queue a job ingesting `files` into `collection` (document ids: `prefix` + file name); returns its id.

        Raises:
            ValueError: no files, a file name that is blank or holds a path separator, or an invalid collection
                name (`tools.scope.ScopeError`).
        """
        check_upload(files, collection)
        async with self._tx("queueing a job") as conn:
            job_id: int = await conn.fetchval(
                "INSERT INTO ingest_jobs (files_total, prefix, collection, params) VALUES ($1, $2, $3, $4::jsonb) "
                "RETURNING id",
                len(files),
                prefix,
                collection,
                json.dumps(upload_params(groups)),
            )
            await conn.copy_records_to_table(
                "ingest_job_files",
                records=[(job_id, i, f.name, f.data) for i, f in enumerate(files)],
                columns=["job_id", "idx", "name", "data"],
            )
        return job_id

    async def submit_sync(self, params: dict[str, Any], collection: str = DEFAULT_COLLECTION) -> int:
        """Queue a job syncing the folder `params["path"]` (with `prefix`, `include`, `exclude`) into `collection`;
        returns its id.

        Raises:
            ValueError: no path, or an invalid collection name (`tools.scope.ScopeError`).
        """
        check_sync(params, collection)
        async with self._tx("queueing a sync job") as conn:
            job_id: int = await conn.fetchval(
                "INSERT INTO ingest_jobs (files_total, prefix, collection, kind, params) "
                "VALUES (0, $1, $2, 'sync', $3::jsonb) RETURNING id",
                str(params.get("prefix") or ""),
                collection,
                json.dumps(params),
            )
        return job_id

    async def claim(self, worker: str, lease_s: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Job | None:
        """The oldest claimable job (queued, or running with an expired lease and fewer than `max_attempts` claims
        so far), now running for `worker` under a lease of `lease_s` seconds and a new attempt number (`Job.attempts`,
        the fencing token of every later write); None when there is none.

        A running job whose lease expired after `max_attempts` claims (its worker died that often, e.g. on a file
        that crashes the process) is marked `failed` instead, with an error saying so: it is not retried forever.
        """
        async with self._tx("claiming a job") as conn:
            await conn.execute(
                """
                WITH failed AS (
                    UPDATE ingest_jobs SET status = 'failed', finished_at = now(), lease_until = NULL,
                        errors = errors || jsonb_build_array(jsonb_build_object('file', '', 'error', format(
                            $2::text, attempts)))
                    WHERE status = 'running' AND lease_until < now() AND attempts >= $1
                    RETURNING id
                )
                DELETE FROM ingest_job_files WHERE job_id IN (SELECT id FROM failed)
                """,
                max_attempts,
                ABANDONED,
            )
            row = await conn.fetchrow(
                f"""
                UPDATE ingest_jobs j SET status = 'running', worker = $1, attempts = j.attempts + 1,
                    started_at = now(), lease_until = now() + make_interval(secs => $2), files_done = 0, chunks = 0,
                    errors = '[]'
                WHERE j.id = (
                    SELECT id FROM ingest_jobs
                    WHERE status = 'queued' OR (status = 'running' AND lease_until < now() AND attempts < $3)
                    ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1
                )
                RETURNING {_JOB_COLUMNS}
                """,
                worker,
                lease_s,
                max_attempts,
            )
        return _job(row) if row is not None else None

    async def heartbeat(self, job_id: int, worker: str, lease_s: float, *, attempt: int) -> bool:
        """Renew the lease of `worker`'s claim `attempt` on job `job_id` for `lease_s` seconds; False when the job is
        no longer that claim's (another worker claimed it after the lease expired, or it ended)."""
        return await self._fenced(
            "renewing a job's lease",
            "lease_until = now() + make_interval(secs => $4)",
            job_id,
            worker,
            attempt,
            lease_s,
        )

    async def files(self, job_id: int) -> list[JobFile]:
        """The files of job `job_id`, in upload order."""
        async with self._tx("reading a job's files", READ) as conn:
            rows = await conn.fetch("SELECT name, data FROM ingest_job_files WHERE job_id = $1 ORDER BY idx", job_id)
        return [JobFile(r["name"], bytes(r["data"])) for r in rows]

    async def progress(self, job_id: int, worker: str, done: JobProgress, *, attempt: int) -> bool:
        """Record the progress `done` of `worker`'s claim `attempt` on job `job_id` (and its `files_total` when
        given: a sync job's, once its plan is known); False (nothing written) when the job is no longer that
        claim's."""
        assignments = "files_done = $4, chunks = $5, errors = $6::jsonb, files_total = COALESCE($7, files_total)"
        values = (done.files_done, done.chunks, json.dumps(done.errors), done.files_total)
        return await self._fenced("recording a job's progress", assignments, job_id, worker, attempt, *values)

    async def finish(self, job_id: int, worker: str, outcome: JobOutcome, *, attempt: int) -> bool:
        """Mark job `job_id` `done` or `failed` (with its `result`, e.g. a sync's summary) and delete its uploaded
        bytes, in one transaction, if it is still `worker`'s claim `attempt`; False (nothing written) otherwise."""
        assignments = "status = $4, finished_at = now(), lease_until = NULL, timings = $5::jsonb, result = $6::jsonb"
        result = None if outcome.result is None else json.dumps(outcome.result)
        values = (outcome.status, json.dumps(outcome.timings), result)
        async with self._tx("finishing a job") as conn:
            written = await conn.execute(
                f"UPDATE ingest_jobs SET {assignments} WHERE {_FENCED}", job_id, worker, attempt, *values
            )
            if not written.endswith(" 1"):
                return False
            await conn.execute("DELETE FROM ingest_job_files WHERE job_id = $1", job_id)
        return True

    async def document_chunks(self, doc_id: str, collection: str = DEFAULT_COLLECTION) -> int:
        """Chunks stored for document `doc_id` of `collection` (0 when it is not stored there)."""
        async with self._tx("counting a document's chunks", READ) as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.doc_id = $1 AND d.collection = $2",
                doc_id,
                collection,
            )
        return int(count or 0)

    async def get(self, job_id: int, collections: Sequence[str] | None = None) -> Job | None:
        """Job `job_id` when it ingests into one of `collections` (None: any), else None, exactly as when there is
        no such job."""
        async with self._tx("reading a job", READ) as conn:
            row = await conn.fetchrow(
                f"SELECT {_JOB_COLUMNS} FROM ingest_jobs "
                "WHERE id = $1 AND ($2::text[] IS NULL OR collection = ANY($2))",
                job_id,
                None if collections is None else list(collections),
            )
        return _job(row) if row is not None else None

    async def list(self, limit: int = 50, collections: Sequence[str] | None = None) -> list[Job]:
        """The `limit` most recent jobs ingesting into `collections` (None: any), newest first."""
        async with self._tx("listing jobs", READ) as conn:
            rows = await conn.fetch(
                f"""
                SELECT {_JOB_COLUMNS} FROM ingest_jobs WHERE $2::text[] IS NULL OR collection = ANY($2::text[])
                ORDER BY id DESC LIMIT $1
                """,
                limit,
                None if collections is None else list(collections),
            )
        return [_job(r) for r in rows]
