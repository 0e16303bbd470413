"""`tools.ingest.sync_watch.watch_folder` driven by an injected iterator of event batches (no file system events, no
clock): one sync first, one per batch, a failed sync reported without ending the watch, and the stop event ending
it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tools.errors import StoreUnavailableError
from tools.ingest.sync_plan import SyncReport
from tools.ingest.sync_watch import watch_folder

GENEROUS_S = 60.0
"""A bound on waiting for the watch (the outcome does not depend on it)."""


async def batches(queue: asyncio.Queue[object | None]) -> AsyncIterator[object]:
    while (item := await queue.get()) is not None:
        yield item


async def test_each_batch_of_events_runs_one_sync_until_the_events_end(tmp_path: Path) -> None:
    reports: list[SyncReport] = []
    errors: list[Exception] = []
    runs = 0

    async def sync() -> SyncReport:
        nonlocal runs
        runs += 1
        if runs == 3:
            raise StoreUnavailableError("Postgres is restarting")
        return SyncReport(added=[f"run-{runs}"])

    queue: asyncio.Queue[object | None] = asyncio.Queue()
    for item in ({"change"}, {"change"}, {"change"}, None):
        queue.put_nowait(item)
    watching = watch_folder(
        tmp_path, sync, reports.append, stop=asyncio.Event(), events=batches(queue), on_error=errors.append
    )
    count = await asyncio.wait_for(watching, GENEROUS_S)
    assert count == 4 and [r.added for r in reports] == [["run-1"], ["run-2"], ["run-4"]]
    assert [type(e) for e in errors] == [StoreUnavailableError]


async def test_the_stop_event_ends_the_watch_after_the_sync_in_progress(tmp_path: Path) -> None:
    stop = asyncio.Event()
    reports: list[SyncReport] = []

    async def sync() -> SyncReport:
        if reports:
            stop.set()  # Ctrl-C while the second sync runs
        return SyncReport(unchanged=len(reports))

    queue: asyncio.Queue[object | None] = asyncio.Queue()
    queue.put_nowait({"change"})
    queue.put_nowait({"change"})  # never reached: the watch stopped
    count = await asyncio.wait_for(watch_folder(tmp_path, sync, reports.append, stop=stop, events=batches(queue)),
                                   GENEROUS_S)  # fmt: skip
    assert count == 2 and [r.unchanged for r in reports] == [0, 1]


async def test_the_first_quiet_batch_runs_one_catch_up_sync_reported_only_when_it_changed(tmp_path: Path) -> None:
    reports: list[SyncReport] = []
    runs = 0

    async def sync() -> SyncReport:
        nonlocal runs
        runs += 1
        return SyncReport(added=["late.md"] if runs == 2 else [])

    queue: asyncio.Queue[object | None] = asyncio.Queue()
    quiet: list[object | None] = [set(), set(), set(), None]  # the watcher started; nothing happened afterwards
    for item in quiet:
        queue.put_nowait(item)
    count = await asyncio.wait_for(
        watch_folder(tmp_path, sync, reports.append, stop=asyncio.Event(), events=batches(queue)), GENEROUS_S
    )
    assert count == 2 and [r.added for r in reports] == [[], ["late.md"]]


@pytest.mark.parametrize("name", ["note-{i}.md", ".rag-groups"])
async def test_real_file_events_run_a_sync(tmp_path: Path, name: str) -> None:
    """watchfiles' own iterator: a file written after the first sync runs a second one; an edit of a folder's
    `.rag-groups` alone too (its rules are applied by that sync, `tools.ingest.sync`)."""
    stop, first, second = asyncio.Event(), asyncio.Event(), asyncio.Event()
    reports: list[SyncReport] = []

    async def sync() -> SyncReport:
        if first.is_set():
            second.set()
            stop.set()
        first.set()
        return SyncReport()

    watching = asyncio.create_task(watch_folder(tmp_path, sync, reports.append, stop=stop, debounce_ms=50))
    await asyncio.wait_for(first.wait(), GENEROUS_S)  # the watcher starts right after the first sync
    for i in range(200):  # write until an event is seen (the watcher may start after the first write)
        (tmp_path / name.format(i=i)).write_text("# Note\n" if name.endswith(".md") else f"group-{i}\n")
        try:
            await asyncio.wait_for(second.wait(), 0.5)
            break
        except TimeoutError:
            continue
    assert await asyncio.wait_for(watching, GENEROUS_S) == 2
