"""Ingestion jobs that survive restarts: the job worker loop over the jobs table of the store (`tools.store.jobs`:
jobs and their uploaded files, claimed by workers with `FOR UPDATE SKIP LOCKED` under a lease renewed by a heartbeat).

`worker` runs jobs over the ports it is given (`ports.JobQueue`, and ingestion's `tools.ingest.ports`), so its logic
also runs over the in-memory doubles. A worker killed mid-job stops renewing its lease; once the lease has expired
another worker claims the job again and runs it from the start, and ingestion's content-hash keys make the re-run skip
what was stored, so the job ends with the same chunks as a clean run. A worker waits out a restart of Postgres (the
store's `StoreUnavailableError`) with a backoff and goes on polling.
"""

from tools.jobs.worker import run_job, work

__all__ = ["run_job", "work"]
