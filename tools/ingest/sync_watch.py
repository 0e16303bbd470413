"""`rag sync --watch`: after a first sync, each debounced batch of file events under the folder runs an incremental
sync (`tools.ingest.sync`: the stat fast path makes a run with nothing of interest changed read no file), until the
stop event is set (Ctrl-C or SIGTERM in the CLI) or the events end.

Events come from `watchfiles.awatch` (Rust `notify`: inotify on Linux, FSEvents, ...; it groups the events of
`debounce_ms` into one batch); a test or caller may give its own async iterator of batches instead. The first empty
batch (the watcher started, nothing happened) runs one catch-up sync, so a change made while the watcher was starting
is not missed; that sync is reported only when it changed something. A sync that fails because Triton or Postgres is
unavailable is reported and the watch goes on: the next batch of events (or a later run) syncs again and converges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from pathlib import Path
from typing import Any

from watchfiles import awatch

from tools.errors import EmbedderError, StoreError
from tools.ingest.sync_plan import SyncReport

log = logging.getLogger(__name__)

DEBOUNCE_MS = 1600
"""watchfiles' default: events within this many milliseconds make one batch (one sync)."""

TICK_MS = 1000
"""How often the watcher yields an empty batch when nothing happens (only the first one runs a sync)."""

ReportFn = Callable[[SyncReport], None]
"""Called with each sync's report."""
ErrorFn = Callable[[Exception], None]
"""Called with a sync's failure (Triton or Postgres unavailable); the watch goes on."""


async def watch_folder(
    folder: Path,
    sync: Callable[[], Awaitable[SyncReport]],
    on_report: ReportFn,
    *,
    stop: asyncio.Event,
    events: AsyncIterable[Any] | None = None,
    debounce_ms: int = DEBOUNCE_MS,
    on_error: ErrorFn | None = None,
) -> int:
    """Sync once, then once per batch of events, until `stop` is set or `events` ends; returns the syncs run.

    Args:
        folder: watched recursively (when `events` is None).
        sync: one sync run (e.g. `tools.ingest.sync.sync_folder` bound to its request and clients).
        events: batches of file events, an empty batch meaning "no events for a while" (default:
            `watchfiles.awatch(folder)` with `stop` and `debounce_ms`, an empty batch each `TICK_MS`).

    Raises:
        what the first sync raises; later syncs' `EmbedderError` / `StoreError` go to `on_error` (logged when None).
    """
    on_report(await sync())
    runs = 1
    caught_up = False
    batches = events if events is not None else _file_events(folder, stop, debounce_ms)
    async for batch in batches:
        if stop.is_set():
            break
        if not batch and caught_up:
            continue
        catch_up, caught_up = not batch, True
        try:
            report = await sync()
        except (EmbedderError, StoreError) as exc:
            if on_error is not None:
                on_error(exc)
            else:
                log.warning("sync of %s failed (%s); the next change syncs again", folder, exc)
        else:
            if not catch_up or report.changed or report.any_failed:
                on_report(report)
        runs += 1
        if stop.is_set():
            break
    return runs


def _file_events(folder: Path, stop: asyncio.Event, debounce_ms: int) -> AsyncIterable[set[Any]]:
    """watchfiles' batches of events under `folder`, and an empty batch each `TICK_MS` without events: the first
    one (the watcher is running by then) runs a catch-up sync for changes made between the first sync's scan and the
    watcher's start."""
    return awatch(folder, stop_event=stop, debounce=debounce_ms, rust_timeout=TICK_MS, yield_on_timeout=True)
