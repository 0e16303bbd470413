"""The document side of the service, composed once: `IngestionService` ingests files, adds documents, syncs and
watches a folder, queues upload and sync jobs and runs the job workers, over one bulk embedder (`EMBEDDER_MODEL`,
Triton priority 2, `INGEST_MAX_IN_FLIGHT`) and the process' one `VectorStore` (the answer path's, in `rag serve`).

`agent.core.wiring.build_services` builds it beside the answer path (`Services.ingestion`); the commands that only
ingest (`rag ingest`, `rag sync`, `rag worker`, `rag jobs`) open it alone with `agent.core.wiring.open_ingestion`.
The bulk embedder is connected on first use (or on entry when the service runs workers), so listing jobs needs no
Triton.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from tools.embedder import TritonEmbedder
from tools.ingest import IngestOptions, IngestReport, ProgressFn, SourceDocument, ingest, ingest_documents, plan_inputs
from tools.ingest.groups import check_default
from tools.ingest.sync import SyncRequest, sync_folder
from tools.ingest.sync_plan import SyncReport
from tools.ingest.sync_watch import ErrorFn, ReportFn, watch_folder
from tools.jobs import work
from tools.jobs.ports import JobGroups, JobQueue
from tools.jobs.worker import worker_name
from tools.originals import Originals
from tools.records import IngestCounts, Job, JobFile
from tools.scope import DEFAULT_COLLECTION
from tools.store import VectorStore
from tools.store.jobs import PostgresJobQueue
from tools.store.sync_state import PostgresSyncLedger

__all__ = ["IngestionService", "Job", "JobFile", "SyncReport", "SyncRequest"]


class IngestionService:
    """Every way documents get into (and out of) the store, over one bulk embedder and one store; an async context
    manager (entering it starts `workers` job workers, exiting stops them and closes the embedder).

    Args:
        embedder: the bulk embedder (`build_embedder(settings, workload="bulk")`), unconnected, or a factory of it
            (called on first use): the service connects it on first use and closes it on exit.
        store: the process' store, connected by its owner before the service is used (the service never closes it).
        options: the chunk window, batch and file limits (`agent.core.wiring.ingest_options`); each call replaces
            its collection.
        originals: where uploaded and synced files are kept (`KEEP_ORIGINALS`); None: not kept.
        settings: the jobs' lease and poll (`JOBS_LEASE_S`, `JOBS_POLL_S`) and `SYNC_ROOTS`.
        workers: job workers run while the service is entered (`rag serve`: `JOBS_SERVE_WORKERS`).
    """

    def __init__(
        self,
        embedder: TritonEmbedder | Callable[[], TritonEmbedder],
        store: VectorStore,
        options: IngestOptions,
        settings: Settings,
        *,
        originals: Originals | None = None,
        workers: int = 0,
    ) -> None:
        self._embedder = embedder
        self.store = store
        self.options = options
        self.settings = settings
        self.originals = originals
        self.workers = workers
        self.ledger = PostgresSyncLedger(store)
        self._queue: JobQueue | None = None
        self._lock = asyncio.Lock()  # the embedder's connection
        self._queue_lock = asyncio.Lock()  # the jobs tables' set-up (never waits on Triton)
        self._connected = False
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> IngestionService:
        if self.workers > 0:
            self._stop = asyncio.Event()
            await self.queue()
            await self._connected_embedder()
            self._tasks = [
                asyncio.create_task(self._work(f"{worker_name()}:serve{i}", self._stop)) for i in range(self.workers)
            ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._connected = False
        await self._stack.aclose()

    @property
    def embedder(self) -> TritonEmbedder:
        """The bulk embedder (built on first use when given as a factory: its tokenizer is loaded then, so the job
        commands, which embed nothing, need none); not connected until something is embedded."""
        if not isinstance(self._embedder, TritonEmbedder):
            self._embedder = self._embedder()
        return self._embedder

    async def _connected_embedder(self) -> TritonEmbedder:
        """The bulk embedder, connected on the first call (closed on exit)."""
        async with self._lock:
            if not self._connected:
                await self._stack.enter_async_context(self.embedder)
                self._connected = True
        return self.embedder

    def _options(self, collection: str) -> IngestOptions:
        return replace(self.options, collection=collection)

    async def ingest_files(
        self,
        paths: list[Path],
        on_progress: ProgressFn | None = None,
        *,
        root: Path | None = None,
        prefix: str = "",
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        collection: str = DEFAULT_COLLECTION,
        groups: Sequence[str] | None = None,
    ) -> tuple[IngestReport, int, int]:
        """Ingest files and folders (`tools.ingest.ingest`): every input is scanned first (a malformed one stores
        nothing), then documents stream through chunking, embedding and storing in batches of `INGEST_BATCH_DOCS`.

        Args:
            on_progress: called as `(documents handled, documents in all inputs, chunks written)` per batch.
            root, prefix: how document files are named (see `tools.ingest.plan_inputs`).
            include, exclude: globs filtering the files found in folders.
            collection: the collection every document goes into (`tools.scope`).
            groups: the groups allowed to read every document (`tools.ingest.groups`); None: each document's own
                metadata `groups` decides (none: public).

        Returns:
            (the run's report, documents stored afterwards, chunks stored afterwards).

        Raises:
            tools.ingest.IngestError: a path is missing, unreadable, unsupported, malformed, or two inputs get the
                same document id.
            EmbedderError / StoreError: Triton or Postgres failed; stored batches stay, re-running resumes.
        """
        inputs = plan_inputs(paths, root, prefix, include, exclude)
        embedder = await self._connected_embedder()
        on_stored = None if self.originals is None else self.originals.keep_files
        options = replace(self._options(collection), groups=None if groups is None else check_default(groups))
        report = await ingest(inputs, embedder, self.store, options, on_progress, on_stored)
        docs, chunks = await self.store.count()
        return report, docs, chunks

    async def add_documents(
        self, documents: Sequence[SourceDocument], *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Chunk, embed (bulk) and store `documents` in `collection`, `batch_docs` per transaction (batches already
        written stay when a later one fails); the same content under an id stored there is skipped.

        Raises:
            EmbedderError / StoreError: embedding or storing failed.
        """
        embedder = await self._connected_embedder()
        options = self._options(collection)
        total = IngestCounts()
        for i in range(0, len(documents), options.batch_docs):
            counts = await ingest_documents(list(documents[i : i + options.batch_docs]), embedder, self.store, options)
            total = IngestCounts(
                total.added + counts.added, total.skipped + counts.skipped, total.chunks + counts.chunks
            )
        return total

    async def sync(
        self, request: SyncRequest, on_progress: ProgressFn | None = None, *, dry_run: bool = False
    ) -> SyncReport:
        """One sync of `request.folder` into `request.collection` (`tools.ingest.sync.sync_folder`).

        Raises:
            tools.ingest.IngestError: the folder or root is wrong. EmbedderError / StoreError: Triton or Postgres
                failed; the files done stay done, a re-run finishes.
        """
        embedder = await self._connected_embedder()
        options = self._options(request.collection)
        return await sync_folder(
            request,
            embedder,
            self.store,
            self.ledger,
            options,
            originals=self.originals,
            on_progress=on_progress,
            dry_run=dry_run,
        )

    async def watch(
        self, request: SyncRequest, on_report: ReportFn, stop: asyncio.Event, *, on_error: ErrorFn | None = None
    ) -> int:
        """Sync `request.folder`, then again after each batch of file events until `stop` is set; returns the syncs
        run (`tools.ingest.sync_watch.watch_folder`)."""

        async def once() -> SyncReport:
            return await self.sync(request)

        return await watch_folder(request.folder, once, on_report, stop=stop, on_error=on_error)

    async def queue(self) -> JobQueue:
        """The jobs queue on the store (its tables created on the first call)."""
        async with self._queue_lock:
            if self._queue is None:
                queue = PostgresJobQueue(self.store.pool, self.store.acquire_timeout_s)
                await queue.setup()
                self._queue = queue
        return self._queue

    async def submit(
        self, files: list[JobFile], prefix: str = "", collection: str = DEFAULT_COLLECTION, groups: JobGroups = None
    ) -> int:
        """Queue a job ingesting `files` into `collection` (ids: `prefix` + file name) readable by `groups` (None:
        their own metadata decides); returns its id."""
        return await (await self.queue()).submit(files, prefix, collection, groups)

    async def submit_sync(self, params: dict[str, Any], collection: str = DEFAULT_COLLECTION) -> int:
        """Queue a job syncing the folder `params["path"]` (`prefix`, `include`, `exclude`) into `collection`."""
        return await (await self.queue()).submit_sync(params, collection)

    async def get(self, job_id: int, collections: Sequence[str] | None = None) -> Job | None:
        """Job `job_id` when it ingests into one of `collections` (None: any), else None."""
        return await (await self.queue()).get(job_id, collections)

    async def list(self, limit: int = 50, collections: Sequence[str] | None = None) -> list[Job]:
        """The `limit` most recent jobs ingesting into `collections` (None: any), newest first."""
        return await (await self.queue()).list(limit, collections)

    async def run_workers(self, count: int, stop: asyncio.Event | None = None) -> None:
        """`count` job worker loops (`tools.jobs.worker.work`, named `host:pid:<i>`) until `stop` is set."""
        await asyncio.gather(*(self._work(f"{worker_name()}:{i}", stop) for i in range(count)))

    async def _work(self, name: str, stop: asyncio.Event | None) -> None:
        """One worker loop; it waits out a Postgres restart (`tools.jobs.worker.work`)."""
        await work(
            await self.queue(),
            await self._connected_embedder(),
            self.store,
            self.ledger,
            options=self.options,
            lease_s=self.settings.jobs_lease_s,
            poll_s=self.settings.jobs_poll_s,
            stop=stop,
            originals=self.originals,
            worker=name,
            sync_roots=self.settings.sync_roots,
        )
