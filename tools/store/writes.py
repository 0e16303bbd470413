"""Writes: ingest (add or replace documents), delete, and the BM25 rebuild; each inside the caller's transaction.

Writers are serialised by a transaction-level advisory lock (`lock_writes`), taken first in every write
transaction: the stored versions are read after it, so a concurrent writer's committed rows are seen, two ingests
of the same new doc id never collide, and the BM25 statistics stay exact. Whether a document is skipped (same
content hash stored in the same collection) is decided here, under that lock, never from a read taken before the
transaction. A document is (collection, doc_id): every write names its collection(s).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tools import bm25
from tools.records import DocumentRecord, IngestCounts, chunk_id, split_groups
from tools.store.records import Conn

WRITE_LOCK = 4243
"""Advisory lock key of the writers (ingest, replace, delete, rebuild)."""


async def lock_writes(conn: Conn) -> None:
    """Serialise writers for the rest of the transaction (see the module docstring)."""
    await conn.execute(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")


async def add_documents(
    conn: Conn,
    docs: Sequence[DocumentRecord],
    unchanged: Mapping[str, str],
    k1: float,
    b: float,
    collection: str,
) -> IngestCounts:
    """Store `docs` in `collection` (skip those stored there with the same hash, replace those stored there with
    another) and check that each doc id of `unchanged` (doc_id -> content hash, sent without chunks) is still stored
    in `collection` with that hash; inside the caller's transaction, which this locks first (`lock_writes`).
    Documents of other collections are never read, replaced or counted. A skipped document whose metadata names
    other groups than those stored keeps its rows and gets those groups (`set_groups`)."""
    await lock_writes(conn)
    wanted = [d.doc_id for d in docs] + list(unchanged)
    rows = await conn.fetch(
        "SELECT doc_id, content_hash, groups FROM documents WHERE collection = $2 AND doc_id = ANY($1::text[]) "
        "FOR UPDATE",
        wanted,
        collection,
    )
    stored = {r["doc_id"]: r["content_hash"] for r in rows}
    stored_groups = {r["doc_id"]: tuple(r["groups"]) for r in rows}
    missing = tuple(doc_id for doc_id, digest in unchanged.items() if stored.get(doc_id) != digest)
    new_docs = {d.doc_id: d for d in docs if stored.get(d.doc_id) != d.content_hash}
    skipped = len(docs) - len(new_docs) + len(unchanged) - len(missing)
    for doc in docs:  # the same content with other groups: kept, its groups set
        groups = split_groups(doc.doc_id, doc.metadata)[0]
        if doc.doc_id not in new_docs and stored_groups.get(doc.doc_id) != groups:
            await set_groups(conn, doc.doc_id, collection, list(groups))
    if not new_docs:
        return IngestCounts(skipped=skipped, missing=missing)
    access = {doc_id: split_groups(doc_id, d.metadata) for doc_id, d in new_docs.items()}
    replaced = await conn.fetch(
        "SELECT id FROM documents WHERE collection = $2 AND doc_id = ANY($1::text[])", list(new_docs), collection
    )
    await delete_rows(conn, [r["id"] for r in replaced])
    rows = await conn.fetch(
        """
        INSERT INTO documents (doc_id, title, source, metadata, content_hash, groups, collection)
        SELECT d, t, s, m, h, ARRAY(SELECT jsonb_array_elements_text(g)), $7::text
        FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::jsonb[]) AS u (d, t, s, m, h, g)
        RETURNING id, doc_id
        """,
        [d.doc_id for d in new_docs.values()],
        [d.title for d in new_docs.values()],
        [d.source for d in new_docs.values()],
        [json.dumps(access[d.doc_id][1]) for d in new_docs.values()],
        [d.content_hash for d in new_docs.values()],
        [json.dumps(access[d.doc_id][0]) for d in new_docs.values()],
        collection,
    )
    ids = {r["doc_id"]: r["id"] for r in rows}
    records = [
        (
            ids[doc.doc_id],
            chunk_id(collection, doc.doc_id, c.chunk_index),
            c.chunk_index,
            c.text,
            c.token_count,
            c.embedding,
            json.dumps(c.metadata),
        )
        for doc in new_docs.values()
        for c in doc.chunks
    ]
    await conn.copy_records_to_table(
        "chunks",
        records=records,
        columns=["document_id", "chunk_id", "chunk_index", "text", "token_count", "embedding", "metadata"],
    )
    await bm25.add_chunks(conn, list(ids.values()), k1, b)
    return IngestCounts(added=len(new_docs), skipped=skipped, chunks=len(records), missing=missing)


async def delete_documents(
    conn: Conn, doc_ids: list[str], source: str | None, collections: Sequence[str] | None
) -> list[str]:
    """Delete the documents named in `doc_ids` and (when given) every document of `source`, only in `collections`
    (None: every collection); inside the caller's transaction, which this locks first. Returns the doc ids deleted,
    sorted (a doc id deleted from two collections is listed twice).

    A folder sync's record of a deleted document (`sync_files` rows naming it, `tools.store.sync_state`) is deleted
    with it, so the next sync of that folder adds the file again (the store converges to the folder)."""
    await lock_writes(conn)
    rows = await conn.fetch(
        """
        SELECT id, doc_id, collection FROM documents
        WHERE (doc_id = ANY($1::text[]) OR ($2::text IS NOT NULL AND source = $2::text))
          AND ($3::text[] IS NULL OR collection = ANY($3::text[]))
        ORDER BY doc_id, collection FOR UPDATE
        """,
        doc_ids,
        source,
        None if collections is None else list(collections),
    )
    await delete_rows(conn, [r["id"] for r in rows])
    if rows and await conn.fetchval("SELECT to_regclass('sync_files') IS NOT NULL"):
        await conn.execute(
            """
            DELETE FROM sync_files f USING sync_sources s
            WHERE f.source_id = s.id AND f.status = 'stored'
              AND (s.collection, f.doc_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
            """,
            [r["collection"] for r in rows],
            [r["doc_id"] for r in rows],
        )
    return [r["doc_id"] for r in rows]


async def set_groups(conn: Conn, doc_id: str, collection: str, groups: list[str]) -> bool:
    """Set the `groups` of document `doc_id` of `collection` and of its chunks; inside the caller's transaction,
    which this locks first. The documents' trigger bumps the collection's version (`schema.ANSWER_CACHE_SQL`).
    Returns False when no such document is stored."""
    await lock_writes(conn)
    document_id = await conn.fetchval(
        "UPDATE documents SET groups = $3::text[] WHERE doc_id = $1 AND collection = $2 RETURNING id",
        doc_id,
        collection,
        groups,
    )
    if document_id is None:
        return False
    await conn.execute("UPDATE chunks SET groups = $2::text[] WHERE document_id = $1", document_id, groups)
    return True


async def rebuild_full_text(conn: Conn, k1: float, b: float) -> None:
    """Recompute the BM25 statistics and impacts (`tools.bm25.rebuild`); inside the caller's transaction."""
    await lock_writes(conn)
    await bm25.rebuild(conn, k1, b)


async def delete_rows(conn: Conn, ids: list[int]) -> None:
    """Delete documents by primary key `ids` with their chunks and postings (ON DELETE CASCADE), taking them out
    of the BM25 statistics first; inside the caller's transaction, after `lock_writes`."""
    if ids:
        await bm25.remove_chunks(conn, ids)
        await conn.execute("DELETE FROM documents WHERE id = ANY($1::bigint[])", ids)
