"""The staging table of large documents (`ingest_staged_chunks`) and its statements, on the store's write pool.

A large document's chunks are staged a sub-batch at a time (`stage_chunks`), keyed by collection, doc id and chunk
index and tagged with the content hash, then moved into `chunks` in one transaction under the writers' lock
(`commit_staged`); `resume_point` tells a re-run how many of them an earlier run left staged. The chunking and
embedding around it is `tools.ingest.staging`.

Every operation is one transaction (`tools.store.pools.transaction`, bounded acquire), and Postgres' failures come out
as the store's errors (`StoreUnavailableError` while Postgres is down or restarting, `StoreBusyError`,
`StoreQueryError`), never asyncpg's. What was staged before a failure stays for the next run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

import asyncpg

from tools import bm25
from tools.records import StagedDocument, StagedRow, split_groups
from tools.scope import qualified_doc_id
from tools.store import pools
from tools.store.writes import delete_rows, lock_writes


class StagingStore(Protocol):
    """What the staging statements need of the store (`tools.store.VectorStore`): its write pool, the bounded wait
    for a connection, and the BM25 parameters the committed chunks are counted with."""

    @property
    def write_pool(self) -> asyncpg.Pool:
        """The pool writes go through (the primary)."""
        ...

    acquire_timeout_s: float
    bm25_k1: float
    bm25_b: float


SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS ingest_staged_chunks (
    collection text NOT NULL DEFAULT 'default',
    doc_id text NOT NULL,
    content_hash text NOT NULL,
    chunk_index integer NOT NULL,
    text text NOT NULL,
    token_count integer NOT NULL,
    embedding vector NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    CONSTRAINT ingest_staged_chunks_key PRIMARY KEY (collection, doc_id, chunk_index)
)
"""

MIGRATE_SQL = """
ALTER TABLE ingest_staged_chunks ADD COLUMN IF NOT EXISTS collection text NOT NULL DEFAULT 'default';
ALTER TABLE ingest_staged_chunks DROP CONSTRAINT IF EXISTS ingest_staged_chunks_pkey;
ALTER TABLE ingest_staged_chunks ADD CONSTRAINT ingest_staged_chunks_key PRIMARY KEY (collection, doc_id, chunk_index);
"""
"""A staging table of a version before collections (primary key (doc_id, chunk_index)) gets the collection."""

COLUMNS = ["collection", "doc_id", "content_hash", "chunk_index", "text", "token_count", "embedding", "metadata"]
"""The columns of a staged row (`StagedRow`), in its order."""


async def resume_point(store: StagingStore, doc: StagedDocument, collection: str) -> int:
    """Chunks of `doc`'s content staged in `collection` ready to reuse (chunk indexes 0..n-1: returns n); staged
    chunks of another content hash (the file changed) are dropped, and so is a staged run with a gap. Creates the
    table when missing (and migrates one without collections).

    Raises:
        StoreUnavailableError / StoreBusyError / StoreQueryError: see the module docstring.
    """
    where = "collection = $1 AND doc_id = $2"
    async with pools.transaction(store.write_pool, store.acquire_timeout_s, "reading staged chunks") as conn:
        await conn.execute(SCHEMA_SQL)
        has_collection = await conn.fetchval(
            "SELECT 1 FROM pg_attribute WHERE attrelid = 'ingest_staged_chunks'::regclass AND attname = 'collection'"
        )
        if not has_collection:
            await conn.execute(MIGRATE_SQL)
        await conn.execute(
            f"DELETE FROM ingest_staged_chunks WHERE {where} AND content_hash <> $3",
            collection,
            doc.doc_id,
            doc.content_hash,
        )
        row = await conn.fetchrow(
            f"SELECT count(*) AS n, coalesce(max(chunk_index) + 1, 0) AS top FROM ingest_staged_chunks WHERE {where}",
            collection,
            doc.doc_id,
        )
        assert row is not None
        if row["n"] != row["top"]:  # a gap cannot come from this module; start the document over
            await conn.execute(f"DELETE FROM ingest_staged_chunks WHERE {where}", collection, doc.doc_id)
            return 0
        return int(row["n"])


async def stage_chunks(store: StagingStore, rows: Sequence[StagedRow]) -> None:
    """Stage `rows` (one sub-batch) in one transaction (`COPY`).

    Raises:
        StoreUnavailableError / StoreBusyError / StoreQueryError: see the module docstring; nothing of `rows` is
            staged then.
    """
    async with pools.transaction(store.write_pool, store.acquire_timeout_s, "staging chunks") as conn:
        await conn.execute(SCHEMA_SQL)  # also before any `resume_point` (a no-op once the table exists)
        await conn.copy_records_to_table("ingest_staged_chunks", records=rows, columns=COLUMNS)


async def commit_staged(store: StagingStore, doc: StagedDocument, collection: str) -> int:
    """Move the staged chunks of `doc` (its content hash) into `collection` of the store, replacing a stored version
    there, counting them into the BM25 statistics and dropping the staged rows, in one transaction under the writers'
    lock (`tools.store.writes.lock_writes`): the document is searchable only from then on.

    Returns:
        The number of chunks stored.

    Raises:
        StoreUnavailableError / StoreBusyError / StoreQueryError: see the module docstring; nothing is stored then
            and the staged chunks stay.
        AccessError: the document's metadata `groups` is not valid (names the document and the group); nothing is
            stored.
    """
    groups, metadata = split_groups(doc.doc_id, doc.metadata)
    action = f"storing the staged chunks of {doc.doc_id!r}"
    async with pools.transaction(store.write_pool, store.acquire_timeout_s, action) as conn:
        await lock_writes(conn)
        replaced = await conn.fetch(
            "SELECT id FROM documents WHERE collection = $1 AND doc_id = $2 FOR UPDATE", collection, doc.doc_id
        )
        await delete_rows(conn, [r["id"] for r in replaced])
        document_id = await conn.fetchval(
            "INSERT INTO documents (doc_id, title, source, metadata, content_hash, collection, groups) "
            "VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::text[]) RETURNING id",
            doc.doc_id,
            doc.title,
            doc.source,
            json.dumps(metadata),
            doc.content_hash,
            collection,
            list(groups),
        )
        status = await conn.execute(
            """
            INSERT INTO chunks (document_id, chunk_id, chunk_index, text, token_count, embedding, metadata)
            SELECT $1, $5 || chunk_index, chunk_index, text, token_count, embedding, metadata
            FROM ingest_staged_chunks WHERE collection = $4 AND doc_id = $2 AND content_hash = $3
            ORDER BY chunk_index
            """,
            document_id,
            doc.doc_id,
            doc.content_hash,
            collection,
            f"{qualified_doc_id(collection, doc.doc_id)}#",
        )
        await bm25.add_chunks(conn, [document_id], store.bm25_k1, store.bm25_b)
        await conn.execute(
            "DELETE FROM ingest_staged_chunks WHERE collection = $1 AND doc_id = $2", collection, doc.doc_id
        )
    return int(status.split()[-1])
