"""Ingestion jobs that survive restarts: a Postgres table of jobs (and their uploaded files) claimed by workers with
`FOR UPDATE SKIP LOCKED`, a lease renewed by a heartbeat, and a worker loop that ingests a job's files.

`queue` holds the table and its statements (submit, claim, heartbeat, progress, finish, list, get); `worker` runs
jobs. A worker killed mid-job stops renewing its lease; once the lease has expired another worker claims the job
again and runs it from the start, and ingestion's content-hash keys make the re-run skip what was stored, so the job
ends with the same chunks as a clean run.
"""

from tools.jobs.queue import Job, JobFile, JobQueue, JobStatus
from tools.jobs.worker import run_job, work

__all__ = ["Job", "JobFile", "JobQueue", "JobStatus", "run_job", "work"]
