"""The state of folder syncs (`rag sync`) and the writes that change a document together with it, on the store's
write pool: each file's change is one transaction under the writers' lock (`tools.store.writes.lock_writes`) that
writes the document and its `sync_files` row together, so an interrupted sync leaves every file either done (state
and document) or untouched, and a re-run finishes it.

Schema (created idempotently by `PostgresSyncLedger.setup`, like the jobs tables):
- `sync_sources(id, folder, collection, root, prefix, include jsonb, exclude jsonb, created_at, synced_at)`, UNIQUE
  (folder, collection): one synced folder per collection; the naming options and globs of its last run;
- `sync_files(source_id -> sync_sources, rel_path, size, mtime_ns, file_hash, doc_id, content_hash, status,
  synced_at)`, PRIMARY KEY (source_id, rel_path): what the last sync saw of each file (its stat and the sha256 of its
  bytes) and the document it owns (`status` `stored`; `empty` for a file with no text and `skipped` for a type that
  is not synced: no document).

Ownership: a sync source owns the documents its `sync_files` rows name; a sync removes only those, and not one that
another source of the same collection also names. A document id is the file's path relative to the root, so a
document already stored under a file's id (e.g. ingested earlier from the same folder with `rag ingest`) is that
file's document: the sync adopts it (same content) or replaces it, and from then on owns it. Deleting a document by
other means (`rag docs delete`, `DELETE /v1/documents`) deletes the `sync_files` rows naming it in the same
transaction (`tools.store.writes.delete_documents`), so the next sync adds the file again.

One sync of a source at a time: `PostgresSyncLedger.exclusive` holds a transaction-level advisory lock keyed on the
source (its folder and collection) for the whole run, on a connection of its own (an open transaction pins one server
connection behind PgBouncer in transaction mode, where a session lock would not); a second sync of the same source
waits for the first to end, then finds what is left to do.

Every method raises the store's errors (`StoreUnavailableError`, `StoreBusyError`, `StoreQueryError`), never
asyncpg's; a failed transaction writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager

import asyncpg

from tools.records import DocumentRecord, FileState, IngestCounts, StoredFile, SyncSource, chunk_id
from tools.store import pools
from tools.store.errors import translated
from tools.store.records import Conn
from tools.store.vector_store import VectorStore
from tools.store.writes import add_documents, delete_rows, lock_writes

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS sync_sources (
    id bigserial PRIMARY KEY,
    folder text NOT NULL,
    collection text NOT NULL,
    root text NOT NULL,
    prefix text NOT NULL DEFAULT '',
    include jsonb NOT NULL DEFAULT '[]',
    exclude jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    synced_at timestamptz,
    UNIQUE (folder, collection)
);
CREATE TABLE IF NOT EXISTS sync_files (
    source_id bigint NOT NULL REFERENCES sync_sources(id) ON DELETE CASCADE,
    rel_path text NOT NULL,
    size bigint NOT NULL,
    mtime_ns bigint NOT NULL,
    file_hash text NOT NULL,
    doc_id text NOT NULL,
    content_hash text,
    status text NOT NULL CHECK (status IN ('stored', 'empty', 'skipped')),
    synced_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, rel_path)
);
CREATE INDEX IF NOT EXISTS sync_files_doc ON sync_files (doc_id);
"""

SCHEMA_LOCK = 4245
"""Advisory lock key that serialises concurrent creation of the sync tables."""

SYNC_LOCK = 4246
"""First key of the two-key advisory lock one sync of a source holds (`PostgresSyncLedger.exclusive`); the second
is `hashtext(collection || newline || folder)` (a collection name holds no newline)."""

log = logging.getLogger(__name__)


class PostgresSyncLedger:
    """The sync tables over a connected `VectorStore`'s pools (the `tools.ingest.ports.SyncLedger` of Postgres); one
    transaction per method.

    Args:
        store: connected; its write pool, acquire timeout and BM25 parameters are used.
    """

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def _write(self, action: str) -> AbstractAsyncContextManager[Conn]:
        return pools.transaction(self.store.write_pool, self.store.acquire_timeout_s, action)

    def _read(self, action: str) -> AbstractAsyncContextManager[Conn]:
        return pools.transaction(self.store.pool, self.store.acquire_timeout_s, action, "BEGIN READ ONLY")

    async def setup(self) -> None:
        """Create the tables when missing (idempotent; concurrent callers serialised by an advisory lock)."""
        async with self._write("creating the sync tables") as conn:
            await conn.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
            await conn.execute(SCHEMA_SQL)

    @contextlib.asynccontextmanager
    async def exclusive(self, folder: str, collection: str) -> AsyncIterator[None]:
        """Hold the lock of the source of `folder` (absolute) in `collection` while the block runs: another sync of
        the same source waits until it ends (logged when it has to wait). The lock is a transaction-level advisory
        lock in a transaction kept open on a connection of its own (not the pools'); it goes when the block ends or
        the connection is lost.

        Raises:
            StoreUnavailableError / StoreQueryError: Postgres refused or failed.
        """
        key = f"{collection}\n{folder}"
        with translated(f"locking the sync of {folder} into {collection}"):
            conn = await asyncpg.connect(self.store.dsn, statement_cache_size=self.store.statement_cache_size)
        try:
            with translated(f"locking the sync of {folder} into {collection}"):
                await conn.execute("BEGIN")
                got = await conn.fetchval("SELECT pg_try_advisory_xact_lock($1, hashtext($2))", SYNC_LOCK, key)
                if not got:
                    log.warning("another sync of %s into %s is running; waiting for it to end", folder, collection)
                    await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", SYNC_LOCK, key)
            yield
        finally:
            try:
                await conn.execute("ROLLBACK")  # ends the transaction: the lock goes
                await conn.close()
            except Exception:  # noqa: BLE001 (the connection is gone: its lock went with it)
                conn.terminate()

    async def find_source(self, folder: str, collection: str) -> SyncSource | None:
        """The source of `folder` (absolute) in `collection`, or None when it was never synced."""
        async with self._read("reading a sync source") as conn:
            row = await conn.fetchrow(
                "SELECT id, folder, collection, root, prefix, include, exclude FROM sync_sources "
                "WHERE folder = $1 AND collection = $2",
                folder,
                collection,
            )
        if row is None:
            return None
        return SyncSource(
            row["id"],
            row["folder"],
            row["collection"],
            row["root"],
            row["prefix"],
            tuple(json.loads(row["include"])),
            tuple(json.loads(row["exclude"])),
        )

    async def open_source(
        self, folder: str, collection: str, root: str, prefix: str, include: Sequence[str], exclude: Sequence[str]
    ) -> int:
        """The id of the source of `folder` in `collection`, created when new; its naming options and globs set to
        this run's."""
        async with self._write("recording a sync source") as conn:
            source_id: int = await conn.fetchval(
                """
                INSERT INTO sync_sources (folder, collection, root, prefix, include, exclude)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb)
                ON CONFLICT (folder, collection) DO UPDATE SET root = EXCLUDED.root, prefix = EXCLUDED.prefix,
                    include = EXCLUDED.include, exclude = EXCLUDED.exclude
                RETURNING id
                """,
                folder,
                collection,
                root,
                prefix,
                json.dumps(list(include)),
                json.dumps(list(exclude)),
            )
        return source_id

    async def files(self, source_id: int) -> dict[str, FileState]:
        """rel_path -> what the last sync recorded of it, for source `source_id`."""
        async with self._read("reading the synced files") as conn:
            rows = await conn.fetch(
                "SELECT rel_path, size, mtime_ns, file_hash, doc_id, content_hash, status FROM sync_files "
                "WHERE source_id = $1",
                source_id,
            )
        return {r["rel_path"]: FileState(**dict(r)) for r in rows}

    async def finished(self, source_id: int) -> None:
        """Record that a sync of source `source_id` ran to its end (`synced_at`)."""
        async with self._write("recording the end of a sync") as conn:
            await conn.execute("UPDATE sync_sources SET synced_at = now() WHERE id = $1", source_id)

    async def store_file(
        self, source_id: int, collection: str, state: FileState, record: DocumentRecord | None
    ) -> StoredFile:
        """Write `record` (None: the document is stored unchanged with `state.content_hash`; a `state` of status
        `empty` or `skipped`: no document) and the file's state, in one transaction. The document the file's recorded
        state owned goes in the same transaction when it is not the one written (the file has no text any more, or
        its doc id changed with `--prefix` or `--root`), unless another source of the collection names it.

        Returns:
            The write's counts and the doc id removed (or None); when `record` is None and the document is no longer
            stored with that hash (deleted or replaced meanwhile), its id is in `counts.missing` and nothing is
            written.
        """
        async with self._write(f"storing synced file {state.rel_path}") as conn:
            await lock_writes(conn)
            if state.status != "stored":
                counts = IngestCounts()
            elif record is None:
                assert state.content_hash is not None
                counts = await add_documents(
                    conn, [], {state.doc_id: state.content_hash}, self.store.bm25_k1, self.store.bm25_b, collection
                )
                if counts.missing:
                    return StoredFile(counts)
            else:
                counts = await add_documents(conn, [record], {}, self.store.bm25_k1, self.store.bm25_b, collection)
            owned = await conn.fetchval(
                "SELECT doc_id FROM sync_files WHERE source_id = $1 AND rel_path = $2 AND status = 'stored'",
                source_id,
                state.rel_path,
            )
            keep = state.doc_id if state.status == "stored" else None
            removed = owned is not None and await _remove_owned(conn, source_id, collection, owned, keep=keep)
            await _upsert(conn, source_id, state)
        return StoredFile(counts, owned if removed else None)

    async def touch(self, source_id: int, state: FileState) -> None:
        """Record a file's new stat (its bytes unchanged): no document is written."""
        async with self._write(f"recording synced file {state.rel_path}") as conn:
            await _upsert(conn, source_id, state)

    async def move(
        self, source_id: int, collection: str, old: FileState, new: FileState, path: str, record: DocumentRecord | None
    ) -> IngestCounts:
        """Move the document of `old` to `new.doc_id` (a renamed file) in one transaction with the state rows.

        `record` None: the content is unchanged; the document row, its chunks and vectors are kept, their doc id,
        chunk ids and `source` (`path`) updated (a document already stored under the new id is the new path's document,
        replaced as any write replaces it: see Ownership above). Else `record` (the new version, vectors reused where
        the text is unchanged) replaces both.

        Returns:
            The counts of the write (`added` 1 when `record` was written). With `record` None and no document stored
            under `old.doc_id` (deleted meanwhile), `missing` holds `old.doc_id` and nothing is written: the caller
            writes the file anew.
        """
        async with self._write(f"moving synced file {old.rel_path} to {new.rel_path}") as conn:
            await lock_writes(conn)
            counts = IngestCounts()
            if record is None:
                rows = await conn.fetch(
                    "SELECT id, doc_id FROM documents WHERE collection = $1 AND doc_id = ANY($2::text[]) FOR UPDATE",
                    collection,
                    [old.doc_id, new.doc_id],
                )
                ids = {r["doc_id"]: r["id"] for r in rows}
                if old.doc_id not in ids:  # nothing to move: the target is left alone
                    return IngestCounts(missing=(old.doc_id,))
                if new.doc_id in ids and new.doc_id != old.doc_id:
                    await delete_rows(conn, [ids[new.doc_id]])
                await _rename(conn, ids[old.doc_id], collection, new.doc_id, path)
            else:
                await _remove_owned(conn, source_id, collection, old.doc_id, keep=new.doc_id)
                counts = await add_documents(conn, [record], {}, self.store.bm25_k1, self.store.bm25_b, collection)
            await conn.execute("DELETE FROM sync_files WHERE source_id = $1 AND rel_path = $2", source_id, old.rel_path)
            await _upsert(conn, source_id, new)
        return counts

    async def remove(self, source_id: int, collection: str, state: FileState) -> bool:
        """A file gone from the folder: delete its document (only when `state` is `stored`, and unless another sync
        source of the collection owns the same doc id) and its state row, in one transaction; returns whether a
        document was deleted."""
        async with self._write(f"removing synced file {state.rel_path}") as conn:
            await lock_writes(conn)
            removed = state.status == "stored" and await _remove_owned(conn, source_id, collection, state.doc_id)
            await conn.execute(
                "DELETE FROM sync_files WHERE source_id = $1 AND rel_path = $2", source_id, state.rel_path
            )
        return removed


async def _upsert(conn: Conn, source_id: int, state: FileState) -> None:
    await conn.execute(
        """
        INSERT INTO sync_files (source_id, rel_path, size, mtime_ns, file_hash, doc_id, content_hash, status)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (source_id, rel_path) DO UPDATE SET size = EXCLUDED.size, mtime_ns = EXCLUDED.mtime_ns,
            file_hash = EXCLUDED.file_hash, doc_id = EXCLUDED.doc_id, content_hash = EXCLUDED.content_hash,
            status = EXCLUDED.status, synced_at = now()
        """,
        source_id,
        state.rel_path,
        state.size,
        state.mtime_ns,
        state.file_hash,
        state.doc_id,
        state.content_hash,
        state.status,
    )


async def _remove_owned(conn: Conn, source_id: int, collection: str, doc_id: str, keep: str | None = None) -> bool:
    """Delete document `doc_id` of `collection` unless it is `keep` or another source of the collection names it;
    after `lock_writes`. Returns whether it was deleted."""
    if doc_id == keep:
        return False
    shared = await conn.fetchval(
        """
        SELECT 1 FROM sync_files f JOIN sync_sources s ON s.id = f.source_id
        WHERE s.collection = $1 AND f.doc_id = $2 AND f.source_id <> $3 AND f.status = 'stored' LIMIT 1
        """,
        collection,
        doc_id,
        source_id,
    )
    if shared:
        return False
    rows = await conn.fetch(
        "SELECT id FROM documents WHERE collection = $1 AND doc_id = $2 FOR UPDATE", collection, doc_id
    )
    await delete_rows(conn, [r["id"] for r in rows])
    return bool(rows)


async def _rename(conn: Conn, document_id: int, collection: str, doc_id: str, source: str) -> None:
    """Give document row `document_id` the id `doc_id` and `source`, and its chunks their new chunk ids
    (`tools.records.chunk_id`); chunks, vectors and BM25 postings stay (postings key on the chunk row)."""
    await conn.execute("UPDATE documents SET doc_id = $2, source = $3 WHERE id = $1", document_id, doc_id, source)
    rows = await conn.fetch("SELECT id, chunk_index FROM chunks WHERE document_id = $1", document_id)
    if rows:
        await conn.execute(
            "UPDATE chunks c SET chunk_id = n.chunk_id FROM unnest($1::bigint[], $2::text[]) AS n(id, chunk_id) "
            "WHERE c.id = n.id",
            [r["id"] for r in rows],
            [chunk_id(collection, doc_id, r["chunk_index"]) for r in rows],
        )
