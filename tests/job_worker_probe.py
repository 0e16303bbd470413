"""A job worker (the product's `tools.jobs.work` over the real stack named by the environment) that stops at a point
the test controls: after the first file of a job it prints `paused <job id>` and waits forever, holding the job's
lease, until the test kills it by PID."""

from __future__ import annotations

import asyncio
import sys

from agent.config.settings import Settings
from agent.core.wiring import build_embedder, build_store, ingest_options
from tools.jobs import work
from tools.model_specs import get_spec
from tools.records import Job
from tools.store.jobs import PostgresJobQueue
from tools.store.sync_state import PostgresSyncLedger


async def main() -> None:
    settings = Settings()
    spec = get_spec(settings.embedder_model)

    async def pause(job: Job, done: int) -> None:
        print(f"paused {job.id}", flush=True)
        await asyncio.Event().wait()

    async with (
        build_store(settings.resolved_database_url(), spec.name, spec.dim, settings) as store,
        build_embedder(settings, max_in_flight=2) as embedder,
    ):
        await work(
            PostgresJobQueue(store.pool, store.acquire_timeout_s),
            embedder,
            store,
            PostgresSyncLedger(store),
            options=ingest_options(settings),
            lease_s=settings.jobs_lease_s,
            poll_s=0.2,
            worker="probe",
            after_file=pause,
        )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
