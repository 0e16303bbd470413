"""`rag worker` (run ingestion jobs) and `rag jobs submit|list|show` (queue and inspect them), through the ingestion
service (`agent.core.ingestion`), over the jobs table in the store's database."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli.access import DocumentGroupsOption, split_groups
from agent.config.settings import Settings
from agent.core.errors import InputError
from agent.core.ingestion import Job, JobFile
from agent.core.wiring import check_originals, open_ingestion
from tools.scope import DEFAULT_COLLECTION, check_collection

jobs_app = typer.Typer(help="Ingestion jobs in Postgres: submit files, list jobs, show one.", no_args_is_help=True)
console = Console()


async def run_workers(settings: Settings, workers: int, stop: asyncio.Event | None = None) -> None:
    """`workers` worker loops in this process over the ingestion service (one bulk embedder, one store) until `stop`
    is set.

    Raises:
        OriginalsNotWritableError: `KEEP_ORIGINALS` is on and `ORIGINALS_DIR` is not writable (checked first).
    """
    check_originals(settings)
    async with open_ingestion(settings) as service:
        await service.run_workers(workers, stop)


def worker(
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker loops in this process.")] = 1,
) -> None:
    """Run ingestion jobs from the jobs table until interrupted (Ctrl-C); several `rag worker` processes (and
    `rag serve`) share the table, each job claimed by one (`FOR UPDATE SKIP LOCKED`). A job whose worker died is
    claimed again once its lease (`JOBS_LEASE_S`) has expired."""
    try:
        asyncio.run(run_workers(Settings(), workers))
    except KeyboardInterrupt:
        console.print("stopped; a job in progress is claimed again once its lease expires", markup=False)


def _print_job(job: Job) -> None:
    console.print(
        f"job {job.id} ({job.collection}): {job.status}, {job.files_done}/{job.files_total} files, "
        f"{job.chunks} chunks, "
        f"attempts {job.attempts}, worker {job.worker or '-'}, created {job.created_at.isoformat()}, "
        f"wall {job.timings.get('wall_s', '-')} s",
        markup=False,
        soft_wrap=True,
    )
    for error in job.errors:
        console.print(f"  error: {error['file']}: {error['error']}", markup=False, soft_wrap=True)


@jobs_app.command("submit")
def submit(
    paths: Annotated[list[Path], typer.Argument(help="Files to ingest in one job (stored in Postgres with it).")],
    prefix: Annotated[str, typer.Option(help="Prepended to every document id (the file name).")] = "",
    collection: Annotated[
        str, typer.Option("--collection", help="The collection the documents go into (a-z, 0-9, _ . -).")
    ] = DEFAULT_COLLECTION,
    groups: DocumentGroupsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help='Print {"job_id": N} only.')] = False,
) -> None:
    """Queue one job ingesting `paths` into a collection, readable by `--groups` (kept with the job); a worker
    (`rag worker`, `rag serve`) runs it. Document ids are the prefix and the file names."""
    check_collection(collection)
    readers = None if groups is None else split_groups(groups)
    files = [JobFile(p.name, p.read_bytes()) for p in paths]

    async def run() -> int:
        async with open_ingestion(Settings()) as service:
            return await service.submit(files, prefix, collection, readers)

    job_id = asyncio.run(run())
    console.print(json.dumps({"job_id": job_id}) if as_json else f"queued job {job_id}", markup=False)


@jobs_app.command("list")
def list_jobs(
    limit: Annotated[int, typer.Option(min=1, help="Most recent jobs shown.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the jobs as JSON only.")] = False,
) -> None:
    """The most recent jobs: status, files done, chunks, errors, attempts."""

    async def run() -> list[Job]:
        async with open_ingestion(Settings()) as service:
            return await service.list(limit)

    jobs = asyncio.run(run())
    if as_json:
        print(json.dumps({"jobs": [j.to_json() for j in jobs]}))
        return
    table = Table("job", "collection", "status", "files", "chunks", "errors", "attempts", "worker", "created")
    for j in jobs:
        table.add_row(
            str(j.id),
            j.collection,
            j.status,
            f"{j.files_done}/{j.files_total}",
            str(j.chunks),
            str(len(j.errors)),
            str(j.attempts),
            Text(j.worker or "-"),
            j.created_at.isoformat(timespec="seconds"),
        )
    console.print(table)


@jobs_app.command("show")
def show(
    job_id: Annotated[int, typer.Argument(help="Job id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the job as JSON only.")] = False,
) -> None:
    """One job: status, files done, chunks, errors per file, timings. Exit 1 when there is no such job."""

    async def run() -> Job | None:
        async with open_ingestion(Settings()) as service:
            return await service.get(job_id)

    job = asyncio.run(run())
    if job is None:
        raise InputError(f"no job {job_id}; `rag jobs list` shows the jobs")
    if as_json:
        print(json.dumps(job.to_json()))
    else:
        _print_job(job)
