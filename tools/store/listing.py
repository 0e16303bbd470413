"""Reads of what is stored: counts, stored versions, the stored vectors of documents' chunks, the collections with
their document counts, and document listings (offset pages and keyset pages with a total, optionally narrowed to
titles or ids holding a search text), each inside the caller's transaction and scoped to the collections asked for
(None: every collection).

The search text is matched with `ILIKE '%text%'` on `doc_id` and `title`. No trigram index backs it: each search
reads every document row of the collections (a few ms at 5,000 documents; linear in the documents stored)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import asyncpg
import numpy as np
import numpy.typing as npt

from tools.records import DocumentPage, StoredChunk, StoredDocument, decode_cursor, encode_cursor
from tools.scope import DEFAULT_COLLECTION
from tools.store.records import Conn

_DOCUMENT_COLUMNS = """
d.doc_id, d.title, d.source, d.content_hash, d.ingested_at, d.collection,
(SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks
"""


def _document(r: asyncpg.Record) -> StoredDocument:
    return StoredDocument(
        r["doc_id"], r["title"], r["source"], int(r["chunks"]), r["content_hash"], r["ingested_at"], r["collection"]
    )


def _in(collections: Sequence[str] | None) -> list[str] | None:
    return None if collections is None else list(collections)


async def count(conn: Conn, collections: Sequence[str] | None = None) -> tuple[int, int]:
    """(documents, chunks) stored in `collections` (None: all)."""
    if collections is None:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM documents) AS docs, (SELECT count(*) FROM chunks) AS chunks"
        )
    else:
        row = await conn.fetchrow(
            """
            SELECT (SELECT count(*) FROM documents WHERE collection = ANY($1::text[])) AS docs,
                   (SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id
                    WHERE d.collection = ANY($1::text[])) AS chunks
            """,
            list(collections),
        )
    assert row is not None
    return int(row["docs"]), int(row["chunks"])


async def stored_versions(conn: Conn, doc_ids: list[str], collection: str = DEFAULT_COLLECTION) -> dict[str, str]:
    """doc_id -> stored content hash, for those of `doc_ids` that are stored in `collection`."""
    rows = await conn.fetch(
        "SELECT doc_id, content_hash FROM documents WHERE collection = $2 AND doc_id = ANY($1::text[])",
        doc_ids,
        collection,
    )
    return {r["doc_id"]: r["content_hash"] for r in rows}


async def chunk_vectors(
    conn: Conn, doc_ids: list[str], collection: str = DEFAULT_COLLECTION
) -> dict[str, dict[str, npt.NDArray[np.float32]]]:
    """doc_id -> {sha256 hex of a chunk's text: its stored embedding `(dim,)` float32}, for those of `doc_ids`
    stored in `collection` (the hashes are computed by Postgres: only they and the vectors travel)."""
    rows = await conn.fetch(
        """
        SELECT d.doc_id, encode(sha256(convert_to(c.text, 'UTF8')), 'hex') AS text_hash, c.embedding
        FROM documents d JOIN chunks c ON c.document_id = d.id
        WHERE d.collection = $2 AND d.doc_id = ANY($1::text[])
        """,
        doc_ids,
        collection,
    )
    out: dict[str, dict[str, npt.NDArray[np.float32]]] = {}
    for r in rows:
        vector = r["embedding"]
        array = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
        out.setdefault(r["doc_id"], {})[r["text_hash"]] = np.asarray(array, dtype=np.float32)
    return out


async def offset_page(
    conn: Conn, limit: int | None, offset: int, collections: Sequence[str] | None = None
) -> list[StoredDocument]:
    """Documents of `collections` (None: all) by (doc_id, collection), `limit` of them (all when None) after
    skipping `offset`."""
    rows = await conn.fetch(
        f"""
        SELECT {_DOCUMENT_COLUMNS} FROM documents d
        WHERE $3::text[] IS NULL OR d.collection = ANY($3::text[])
        ORDER BY d.doc_id, d.collection LIMIT $1 OFFSET $2
        """,
        limit,
        offset,
        _in(collections),
    )
    return [_document(r) for r in rows]


def like_pattern(text: str) -> str:
    """The `ILIKE` pattern matching values that contain `text` anywhere: its `%`, `_` and `\\` escaped (Postgres'
    default escape character is the backslash), wrapped in `%`."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _filters(collections: Sequence[str] | None, matching: str | None, first: int) -> tuple[str, list[object]]:
    """SQL conditions (each starting with `AND`) on documents `d` for `collections` and `matching`, numbered from
    parameter `$first`, and their arguments."""
    sql: list[str] = []
    args: list[object] = []
    if collections is not None:
        args.append(list(collections))
        sql.append(f"AND d.collection = ANY(${first + len(args) - 1}::text[])")
    if matching:
        args.append(like_pattern(matching))
        n = first + len(args) - 1
        sql.append(f"AND (d.doc_id ILIKE ${n} OR d.title ILIKE ${n})")
    return " ".join(sql), args


async def count_matching(conn: Conn, collections: Sequence[str] | None, matching: str | None) -> int:
    """Documents of `collections` (None: all) whose doc id or title contains `matching` (case-insensitive; None or
    empty: every document)."""
    where, args = _filters(collections, matching, 1)
    value = await conn.fetchval(f"SELECT count(*) FROM documents d WHERE true {where}", *args)
    return int(value)


async def keyset_page(
    conn: Conn,
    limit: int,
    cursor: str | None,
    offset: int = 0,
    collections: Sequence[str] | None = None,
    matching: str | None = None,
) -> DocumentPage:
    """Up to `limit` documents of `collections` (None: all) after the cursor's (after skipping `offset` more) in
    (doc_id, collection) order, the total of those collections, and the next page's cursor; in a REPEATABLE READ
    transaction the page and the total are one snapshot. One index range scan on (doc_id, collection)
    (`documents_doc_id_collection_key`) that starts at the cursor, whatever the page's position (an `offset` reads
    the rows it skips). Documents of other collections are neither listed nor counted.

    `matching` (None or empty: no narrowing) keeps only documents whose doc id or title contains it,
    case-insensitively (`ILIKE`, see the module docstring); the total then counts those."""
    after = ("", "") if cursor is None else decode_cursor(cursor)
    where, extra = _filters(collections, matching, 5)
    rows = await conn.fetch(
        f"""
        SELECT {_DOCUMENT_COLUMNS} FROM documents d WHERE (d.doc_id, d.collection) > ($1, $2) {where}
        ORDER BY d.doc_id, d.collection OFFSET $3 LIMIT $4
        """,
        after[0],
        after[1],
        offset,
        limit + 1,
        *extra,
    )
    if matching:
        total = await count_matching(conn, collections, matching)
    else:
        total, _ = await count(conn, collections)
    documents = [_document(r) for r in rows[:limit]]
    last = documents[-1] if documents else None
    next_cursor = encode_cursor(last.doc_id, last.collection) if last is not None and len(rows) > limit else None
    return DocumentPage(documents, total, next_cursor)


async def collection_counts(conn: Conn, collections: Sequence[str] | None = None) -> dict[str, int]:
    """Collection name -> documents stored in it, by name: every collection holding a document (None), or exactly
    `collections` (those holding none with 0)."""
    where, args = _filters(collections, None, 1)
    rows = await conn.fetch(
        f"SELECT d.collection, count(*) AS n FROM documents d WHERE true {where} GROUP BY d.collection", *args
    )
    counts = {name: 0 for name in collections or ()}
    counts.update({r["collection"]: int(r["n"]) for r in rows})
    return dict(sorted(counts.items()))


async def find(conn: Conn, doc_id: str, collections: Sequence[str] | None = None) -> list[StoredDocument]:
    """The stored documents named `doc_id` in `collections` (None: all), one per collection, by collection."""
    rows = await conn.fetch(
        f"""
        SELECT {_DOCUMENT_COLUMNS} FROM documents d
        WHERE d.doc_id = $1 AND ($2::text[] IS NULL OR d.collection = ANY($2::text[]))
        ORDER BY d.collection
        """,
        doc_id,
        _in(collections),
    )
    return [_document(r) for r in rows]


async def chunk_metadata(
    conn: Conn, doc_id: str, chunk_id: str, collections: Sequence[str] | None = None
) -> StoredChunk | None:
    """(collection, metadata, text) of the chunk `chunk_id` when it belongs to the document `doc_id` of
    `collections` (None: all); None otherwise (missing, another document's, outside those collections)."""
    row = await conn.fetchrow(
        """
        SELECT d.collection, c.metadata, c.text FROM chunks c JOIN documents d ON d.id = c.document_id
        WHERE c.chunk_id = $1 AND d.doc_id = $2 AND ($3::text[] IS NULL OR d.collection = ANY($3::text[]))
        """,
        chunk_id,
        doc_id,
        _in(collections),
    )
    if row is None:
        return None
    metadata = json.loads(row["metadata"])
    return StoredChunk(str(row["collection"]), metadata if isinstance(metadata, dict) else {}, str(row["text"]))
