"""The worker loop: claim a job; for an upload job write its files to a private temporary folder under numbered
names (an uploaded file name is never used as a path; only a plain extension of it is kept), ingest them through
`tools.ingest` with the job's document ids, record progress, renew the lease, and mark the job done or failed. A sync
job (`kind` `sync`) runs `tools.ingest.sync.sync_folder` on its folder and records the sync's summary as the job's
`result`, and as its `files_total` and `files_done` the files the sync changed or that failed (0 until it ends).

A job is `done` when every file was handled (a file that cannot be extracted is an error of the job, listed per
file, and the other files are stored), `failed` when ingestion itself failed (Triton or Postgres down), or when its
worker died `max_attempts` times running it (a file that crashes the process); a failed job is not retried by
itself. A worker that lost its lease while alive stops before its next file (`LeaseLostError`).

A restart of Postgres does not end a worker: while the store is unavailable (`StoreUnavailableError`, the store's
translation of a refused, closed or restarting connection) the worker logs it, waits (`STORE_BACKOFF`: tenacity's
jittered exponential backoff) and tries again, until the store answers or the worker is told to stop. A job whose run
could not record its outcome because Postgres went away keeps its claim until the lease expires; a worker then claims
it again (a new attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePath
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter
from tenacity.wait import wait_base

from tools.errors import StoreUnavailableError
from tools.extract import sniff
from tools.ingest import IngestOptions, InputFile, ingest
from tools.ingest.documents import IngestError
from tools.ingest.ports import ChunkSink, DocumentEmbedder, KeptOriginals, SyncLedger
from tools.ingest.sync import SyncRequest, sync_folder, within_roots
from tools.ingest.sync_plan import SyncReport
from tools.jobs.ports import JobQueue
from tools.records import DEFAULT_MAX_ATTEMPTS, Job, JobOutcome, JobProgress, JobStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

STORE_BACKOFF: wait_base = wait_exponential_jitter(multiplier=0.5, max=10.0, jitter=0.5)
"""Wait before the worker tries the store again while it is unavailable, seconds: 0.5 doubling per try up to 10, plus
up to 0.5 of random jitter (tenacity's `wait_exponential_jitter`, capped at 10). The embedded Postgres restarts in
about a second; the cap bounds how late a worker notices the end of a longer outage."""


class LeaseLostError(Exception):
    """This run's claim on the job was taken over (its lease expired while the worker was paused)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id}: the lease was lost to another worker")


JobHook = Callable[[Job, int], Awaitable[None]]
"""Awaited after each file of a job is handled, with the files done so far (a test's control point)."""


_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")


def safe_suffix(name: str) -> str:
    """The extension of an uploaded file name when it is a plain one (`.pdf`, `.md`), else empty: the only part of
    the name the worker's file takes (Markdown is told from text by it, and a `.pdf` that is a ZIP is a failure)."""
    suffix = PurePath(name).suffix
    return suffix.lower() if _SUFFIX.fullmatch(suffix) else ""


def worker_name() -> str:
    """`host:pid`, the worker's name in the jobs table."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def run_job(
    job: Job,
    queue: JobQueue,
    embedder: DocumentEmbedder,
    store: ChunkSink,
    ledger: SyncLedger,
    *,
    worker: str,
    options: IngestOptions,
    lease_s: float,
    after_file: JobHook | None = None,
    originals: KeptOriginals | None = None,
    sync_roots: Sequence[Path] = (),
) -> Job | None:
    """Run one claimed job to the end, writing its documents to `store` (a sync job's state to `ledger`); returns its
    final state. With `originals`, each uploaded file whose document
    is stored is kept there as its original (`tools.originals`), for its pages to be rendered. A sync job runs only
    when its folder is inside one of `sync_roots` (`SYNC_ROOTS`; checked again here, as the settings may have changed
    since it was queued); otherwise it fails saying so.

    Files are ingested one at a time (each its own ingest run, so progress and the lease advance per file). The
    lease is renewed every `lease_s / 3` seconds by a background task while the job runs, and before each file;
    every write is fenced by the claim (`job.attempts`). A run whose claim was taken over (it paused past its lease
    and another worker claimed the job) stops before its next file and writes nothing more: the job is the other
    worker's.

    Raises:
        tools.errors.StoreUnavailableError: the store became unavailable (down, restarting, or no pooled connection
            free in time) during the run: nothing is recorded, the job is claimed again once its lease expires.
    """
    start = time.perf_counter()
    errors: list[dict[str, str]] = []
    chunks = 0
    claim = job.attempts  # the fencing token of every write of this run

    async def keep_lease() -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            try:
                kept = await queue.heartbeat(job.id, worker, lease_s, attempt=claim)
            except StoreUnavailableError as exc:  # Postgres restarting: the next beat tries again, fenced as ever
                log.warning("job %d: renewing the lease failed (%s); trying again in %.1f s", job.id, exc, lease_s / 3)
                continue
            if not kept:
                return  # the claim was taken over: the file loop sees it before its next file

    lease = asyncio.create_task(keep_lease())
    status: JobStatus = "done"
    result: dict[str, object] | None = None
    try:
        if job.kind == "sync":
            synced = await run_sync(job, embedder, store, ledger, options, originals, sync_roots)
            result = synced.to_json()
            errors += [{"file": e.path, "error": e.reason} for e in synced.failed]
            # the files the sync changed or that failed (its plan is known only as it runs): set once it ends
            handled = len(synced.added) + len(synced.updated) + len(synced.moved) + len(synced.removed)
            handled += len(synced.failed)
            if not await queue.progress(
                job.id, worker, JobProgress(handled, synced.chunks_written, errors, handled), attempt=claim
            ):
                raise LeaseLostError(job.id)
            files = []
        else:
            files = await queue.files(job.id)
        with tempfile.TemporaryDirectory(prefix=f"rag-job-{job.id}-") as folder:
            for done, f in enumerate(files, 1):
                if lease.done() or not await queue.heartbeat(job.id, worker, lease_s, attempt=claim):
                    raise LeaseLostError(job.id)
                path = Path(folder) / f"{done:06d}{safe_suffix(f.name)}"
                await asyncio.to_thread(path.write_bytes, f.data)
                kind = await asyncio.to_thread(sniff, path)
                inp = InputFile(path, job.prefix + f.name, kind=kind)
                keep = None if originals is None else originals.keep_files  # the uploaded file, kept as its original
                run_options = replace(options, collection=job.collection, groups=job_groups(job.params))
                report = await ingest([inp], embedder, store, run_options, None, keep)
                if inp.kind == "jsonl":  # many documents: the chunks this run wrote
                    chunks += report.chunks
                else:  # the document's chunks, whether this attempt or a killed one stored them
                    chunks += await queue.document_chunks(inp.doc_id or "", job.collection)
                for error in report.file_errors:
                    errors.append({"file": f.name, "error": error.reason.replace(str(path), f.name)})
                for bad in report.failed:
                    errors.append({"file": f.name, "error": f"chunk {bad.chunk_index}: {bad.reason}"})
                await asyncio.to_thread(path.unlink)
                if not await queue.progress(job.id, worker, JobProgress(done, chunks, errors), attempt=claim):
                    raise LeaseLostError(job.id)
                if after_file is not None:
                    await after_file(job, done)
    except LeaseLostError:
        log.warning(
            "job %d: %s lost its lease (claim %d); another worker runs it, this run stops", job.id, worker, claim
        )
        return await queue.get(job.id)
    except StoreUnavailableError:
        # Postgres down, restarting or every pooled connection busy: not the job's fault. The run stops unrecorded;
        # its lease expires and the job is claimed again (ingestion's content-hash keys skip what was stored), up
        # to its max attempts. The worker loop waits the outage out (`work`).
        log.warning("job %d: the store is unavailable; the job is claimed again once its lease expires", job.id)
        raise
    except Exception as exc:  # noqa: BLE001 (any failure of the run is the job's outcome, recorded)
        status = "failed"
        errors.append({"file": "", "error": f"{type(exc).__name__}: {exc}"})
        await queue.progress(job.id, worker, JobProgress(job.files_done, chunks, errors), attempt=claim)
        log.warning("job %d failed: %s", job.id, exc)
    finally:
        lease.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lease
    timings = {"wall_s": round(time.perf_counter() - start, 3)}
    await queue.finish(job.id, worker, JobOutcome(status, timings, result), attempt=claim)
    return await queue.get(job.id)


def job_groups(params: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The groups a job's `params` give its documents (`{"groups": [...]}`, checked when it was queued); None:
    none given (each document's own metadata decides)."""
    groups = params.get("groups")
    return None if groups is None else tuple(str(g) for g in groups)


async def run_sync(
    job: Job,
    embedder: DocumentEmbedder,
    store: ChunkSink,
    ledger: SyncLedger,
    options: IngestOptions,
    originals: KeptOriginals | None = None,
    sync_roots: Sequence[Path] = (),
) -> SyncReport:
    """A sync job's run: `tools.ingest.sync.sync_folder` of the folder and globs of `job.params` into
    `job.collection`, keeping synced files' originals in `originals` when given.

    Raises:
        IngestError: the folder is not inside one of `sync_roots` (the worker's `SYNC_ROOTS`, checked again when the
            job runs: the route checked it when it queued the job, under the settings of then), or none is set.
    """
    params = job.params
    folder = within_roots(Path(str(params["path"])), sync_roots)
    if folder is None:
        roots = ", ".join(str(r) for r in sync_roots) or "none set"
        raise IngestError(f"{params['path']!r} is not a folder inside this worker's SYNC_ROOTS ({roots}); not synced")
    request = SyncRequest(
        folder,
        collection=job.collection,
        prefix=str(params.get("prefix") or ""),
        include=tuple(str(g) for g in params.get("include") or ()),
        exclude=tuple(str(g) for g in params.get("exclude") or ()),
        groups=job_groups(params),
    )
    return await sync_folder(request, embedder, store, ledger, options, originals=originals)


async def _nap(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _when_store_answers(
    call: Callable[[], Awaitable[T]], *, stop: asyncio.Event, backoff: wait_base, worker: str, doing: str
) -> T | None:
    """`call()`, made again after a `backoff` wait (tenacity) each time it raises `StoreUnavailableError`, until it
    returns; None when `stop` is set first (no call is made once it is set; a wait ends at once when it is set).

    Raises:
        whatever `call` raises other than `StoreUnavailableError`.
    """

    async def attempt() -> T | None:
        return None if stop.is_set() else await call()

    def log_wait(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "job worker %s: %s: the store is unavailable (%s); try %d failed, trying again in %.1f s",
            worker,
            doing,
            error,
            state.attempt_number,
            wait,
        )

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(StoreUnavailableError),
        wait=backoff,
        sleep=functools.partial(_nap, stop),
        before_sleep=log_wait,
        reraise=True,
    )
    return await retrying(attempt)


async def work(
    queue: JobQueue,
    embedder: DocumentEmbedder,
    store: ChunkSink,
    ledger: SyncLedger,
    *,
    options: IngestOptions,
    lease_s: float,
    poll_s: float,
    stop: asyncio.Event | None = None,
    worker: str | None = None,
    after_file: JobHook | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    originals: KeptOriginals | None = None,
    backoff: wait_base = STORE_BACKOFF,
    sync_roots: Sequence[Path] = (),
) -> None:
    """Claim and run jobs until `stop` is set (forever when None), polling every `poll_s` seconds when idle; a job
    whose worker died `max_attempts` times is failed, not claimed again.

    While the store is unavailable (Postgres down or restarting: `StoreUnavailableError`, `StoreBusyError`) the worker
    logs it and tries again after a `backoff` wait (default `STORE_BACKOFF`), for as long as it takes; a job whose run
    the outage interrupted is left to its lease (claimed again once it expires). Setting `stop` ends the loop at once,
    a wait included (a job in progress runs to its end first).

    Raises:
        StoreQueryError: Postgres failed a statement of the jobs table (a bug or a schema problem; not retried).
    """
    name = worker or worker_name()
    stop = stop or asyncio.Event()
    retry = functools.partial(_when_store_answers, stop=stop, backoff=backoff, worker=name)

    async def set_up() -> bool:
        await queue.setup()
        return True

    if not await retry(set_up, doing="creating the jobs tables"):
        return
    while not stop.is_set():
        job = await retry(lambda: queue.claim(name, lease_s, max_attempts), doing="claiming a job")
        if job is None:
            await _nap(stop, poll_s)
            continue
        log.info("job %d claimed by %s (attempt %d)", job.id, name, job.attempts)
        try:
            await run_job(
                job,
                queue,
                embedder,
                store,
                ledger,
                worker=name,
                options=options,
                lease_s=lease_s,
                after_file=after_file,
                originals=originals,
                sync_roots=sync_roots,
            )
        except StoreUnavailableError as exc:
            log.warning(
                "job %d: the store became unavailable while %s ran it (%s); the job keeps its claim until the lease "
                "expires, then a worker claims it again",
                job.id,
                name,
                exc,
            )
