"""A folder sync's ledger held in memory: the `tools.ingest.ports.SyncLedger` of the store, with no server, writing
its documents into an `tools.in_memory_sink.InMemorySink`. For the sync's own logic in the fast tier (plans, moves,
removals, adoption, failures, re-runs); the contract suite (`tests/contracts/test_sync_ledger.py`) holds it to
`tools.store.sync_state.PostgresSyncLedger`'s behaviour.

Semantics are the store's: one source per (folder, collection); a file's state is written with its document; a
source removes only documents its states name, and not one another source of the collection names too; the lock of
a source (an `asyncio.Lock`, one per source) excludes a second holder within this event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace

from tools.in_memory_sink import InMemorySink
from tools.records import DocumentRecord, FileState, IngestCounts, StoredFile, SyncSource


@dataclass
class InMemorySyncLedger:
    """Sources and file states in dicts over `sink`'s documents; safe within one event loop (no method awaits
    between its reads and writes).

    Attributes:
        sink: where the documents of the synced files are stored.
        sources: the synced folders by (folder, collection).
        states: the recorded file states by source id, then rel path.
        finished_runs: how many syncs recorded their end, by source id.
    """

    sink: InMemorySink
    sources: dict[tuple[str, str], SyncSource] = field(default_factory=dict)
    states: dict[int, dict[str, FileState]] = field(default_factory=dict)
    finished_runs: dict[int, int] = field(default_factory=dict)
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)

    async def setup(self) -> None:
        """Nothing to make."""

    @contextlib.asynccontextmanager
    async def exclusive(self, folder: str, collection: str) -> AsyncIterator[None]:
        """Hold the source's lock while the block runs (a second holder waits)."""
        async with self._locks.setdefault((folder, collection), asyncio.Lock()):
            yield

    async def find_source(self, folder: str, collection: str) -> SyncSource | None:
        """The source of `folder` in `collection`, or None."""
        return self.sources.get((folder, collection))

    async def open_source(
        self, folder: str, collection: str, root: str, prefix: str, include: Sequence[str], exclude: Sequence[str]
    ) -> int:
        """The source's id (created when new), its naming options and globs set to these."""
        known = self.sources.get((folder, collection))
        source_id = known.id if known is not None else len(self.sources) + 1
        self.sources[folder, collection] = SyncSource(
            source_id, folder, collection, root, prefix, tuple(include), tuple(exclude)
        )
        self.states.setdefault(source_id, {})
        return source_id

    async def files(self, source_id: int) -> dict[str, FileState]:
        """rel_path -> recorded state of source `source_id`."""
        return dict(self.states.get(source_id, {}))

    async def finished(self, source_id: int) -> None:
        """Count a sync of the source that ran to its end."""
        self.finished_runs[source_id] = self.finished_runs.get(source_id, 0) + 1

    async def store_file(
        self, source_id: int, collection: str, state: FileState, record: DocumentRecord | None
    ) -> StoredFile:
        """Write `record` and `state` together (see `tools.ingest.ports.SyncLedger.store_file`)."""
        if state.status != "stored":
            counts = IngestCounts()
        elif record is None:
            assert state.content_hash is not None
            counts = await self.sink.add_documents([], {state.doc_id: state.content_hash}, collection=collection)
            if counts.missing:
                return StoredFile(counts)
        else:
            counts = await self.sink.add_documents([record], {}, collection=collection)
        recorded = self.states.get(source_id, {}).get(state.rel_path)
        owned = recorded.doc_id if recorded is not None and recorded.status == "stored" else None
        keep = state.doc_id if state.status == "stored" else None
        removed = owned is not None and self._remove_owned(source_id, collection, owned, keep)
        self.states.setdefault(source_id, {})[state.rel_path] = state
        return StoredFile(counts, owned if removed else None)

    async def touch(self, source_id: int, state: FileState) -> None:
        """Record a file's new stat."""
        self.states.setdefault(source_id, {})[state.rel_path] = state

    async def move(
        self, source_id: int, collection: str, old: FileState, new: FileState, path: str, record: DocumentRecord | None
    ) -> IngestCounts:
        """Move the document of `old` to `new.doc_id` with the state rows (see `tools.ingest.ports.SyncLedger.move`)."""
        documents = self.sink.documents
        counts = IngestCounts()
        if record is None:
            moving = documents.get((collection, old.doc_id))
            if moving is None:
                return IngestCounts(missing=(old.doc_id,))
            del documents[collection, old.doc_id]
            documents[collection, new.doc_id] = replace(moving, doc_id=new.doc_id, source=path)
        else:
            self._remove_owned(source_id, collection, old.doc_id, keep=new.doc_id)
            counts = await self.sink.add_documents([record], {}, collection=collection)
        states = self.states.setdefault(source_id, {})
        states.pop(old.rel_path, None)
        states[new.rel_path] = new
        return counts

    async def remove(self, source_id: int, collection: str, state: FileState) -> bool:
        """Delete the file's document (unless shared) and its state; whether a document was deleted."""
        removed = state.status == "stored" and self._remove_owned(source_id, collection, state.doc_id)
        self.states.get(source_id, {}).pop(state.rel_path, None)
        return removed

    def _remove_owned(self, source_id: int, collection: str, doc_id: str, keep: str | None = None) -> bool:
        """Delete document `doc_id` of `collection` unless it is `keep` or another source of the collection names
        it; whether it was deleted."""
        if doc_id == keep:
            return False
        others = [s.id for s in self.sources.values() if s.collection == collection and s.id != source_id]
        for other in others:
            if any(f.doc_id == doc_id and f.status == "stored" for f in self.states.get(other, {}).values()):
                return False
        return self.sink.documents.pop((collection, doc_id), None) is not None
