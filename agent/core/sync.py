"""`rag sync`'s wiring: the store and the ingestion embedder the settings describe, opened around one folder sync
(`tools.ingest.sync.sync_folder`) or a watch of the folder (`tools.ingest.sync_watch.watch_folder`)."""

from __future__ import annotations

import asyncio

from agent.config.settings import Settings
from agent.core.wiring import build_embedder, build_originals, build_store, ingest_options
from tools.ingest import ProgressFn
from tools.ingest.sync import SyncRequest, sync_folder
from tools.ingest.sync_plan import SyncReport
from tools.ingest.sync_watch import ErrorFn, ReportFn, watch_folder
from tools.originals import Originals
from tools.store.sync_state import PostgresSyncLedger


async def sync_files(
    settings: Settings,
    request: SyncRequest,
    on_progress: ProgressFn | None = None,
    *,
    dry_run: bool = False,
    originals: Originals | None = None,
) -> SyncReport:
    """One sync of `request.folder` with the settings' store, ingestion embedder (`INGEST_MAX_IN_FLIGHT`) and chunk
    window (`CHUNK_TOKENS`, `CHUNK_OVERLAP_TOKENS`, `INGEST_BATCH_DOCS`, `INGEST_MAX_FILE_BYTES`).

    Raises:
        tools.ingest.IngestError: the folder or root is wrong. EmbedderError / StoreError: Triton or Postgres
            failed; the files done stay done, a re-run finishes.
    """
    originals = build_originals(settings) if originals is None else originals
    embedder = build_embedder(settings, workload="bulk")
    spec = embedder.spec
    options = ingest_options(settings, request.collection)
    async with build_store(settings.resolved_database_url(), spec.name, spec.dim, settings) as store, embedder:
        return await sync_folder(
            request,
            embedder,
            store,
            PostgresSyncLedger(store),
            options,
            originals=originals,
            on_progress=on_progress,
            dry_run=dry_run,
        )


async def watch_files(
    settings: Settings,
    request: SyncRequest,
    on_report: ReportFn,
    stop: asyncio.Event,
    *,
    on_error: ErrorFn | None = None,
    originals: Originals | None = None,
) -> int:
    """Sync `request.folder`, then again after each batch of file events until `stop` is set, with one store and
    embedder held open; returns the syncs run (`tools.ingest.sync_watch.watch_folder`)."""
    originals = build_originals(settings) if originals is None else originals
    embedder = build_embedder(settings, workload="bulk")
    spec = embedder.spec
    options = ingest_options(settings, request.collection)
    async with build_store(settings.resolved_database_url(), spec.name, spec.dim, settings) as store, embedder:

        async def once() -> SyncReport:
            return await sync_folder(request, embedder, store, PostgresSyncLedger(store), options, originals=originals)

        return await watch_folder(request.folder, once, on_report, stop=stop, on_error=on_error)
