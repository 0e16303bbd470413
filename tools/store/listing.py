"""Reads of what is stored: counts, stored versions, and document listings (offset pages and keyset pages with a
total), each inside the caller's transaction."""

from __future__ import annotations

import base64
import binascii

import asyncpg

from tools.store.errors import StoreError
from tools.store.records import Conn, DocumentPage, StoredDocument

_DOCUMENT_COLUMNS = """
d.doc_id, d.title, d.source, d.content_hash, d.ingested_at,
(SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks
"""

MAX_PAGE = 10_000
"""Most documents one keyset page may hold."""


def encode_cursor(doc_id: str) -> str:
    """The opaque cursor of the page after `doc_id` (URL-safe base64 of its UTF-8, no padding)."""
    return base64.urlsafe_b64encode(doc_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The doc id a cursor of `encode_cursor` names. Raises StoreError for anything else."""
    try:
        doc_id = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise StoreError(f"cursor={cursor!r} is not a cursor this store issued; pass a `next_cursor` back") from exc
    if not doc_id or encode_cursor(doc_id) != cursor:
        raise StoreError(f"cursor={cursor!r} is not a cursor this store issued; pass a `next_cursor` back")
    return doc_id


def _document(r: asyncpg.Record) -> StoredDocument:
    return StoredDocument(r["doc_id"], r["title"], r["source"], int(r["chunks"]), r["content_hash"], r["ingested_at"])


async def count(conn: Conn) -> tuple[int, int]:
    """(documents, chunks) stored."""
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM documents) AS docs, (SELECT count(*) FROM chunks) AS chunks"
    )
    assert row is not None
    return int(row["docs"]), int(row["chunks"])


async def stored_versions(conn: Conn, doc_ids: list[str]) -> dict[str, str]:
    """doc_id -> stored content hash, for those of `doc_ids` that are stored."""
    rows = await conn.fetch("SELECT doc_id, content_hash FROM documents WHERE doc_id = ANY($1::text[])", doc_ids)
    return {r["doc_id"]: r["content_hash"] for r in rows}


async def offset_page(conn: Conn, limit: int | None, offset: int) -> list[StoredDocument]:
    """Documents by doc_id, `limit` of them (all when None) after skipping `offset`."""
    rows = await conn.fetch(
        f"SELECT {_DOCUMENT_COLUMNS} FROM documents d ORDER BY d.doc_id LIMIT $1 OFFSET $2", limit, offset
    )
    return [_document(r) for r in rows]


async def keyset_page(conn: Conn, limit: int, cursor: str | None, offset: int = 0) -> DocumentPage:
    """Up to `limit` documents with doc_id after the cursor's (after skipping `offset` more), the total stored, and
    the next page's cursor; in a REPEATABLE READ transaction the page and the total are one snapshot. One index
    range scan on `doc_id` (`documents_doc_id_key`) that starts at the cursor, whatever the page's position (an
    `offset` reads the rows it skips)."""
    after = None if cursor is None else decode_cursor(cursor)
    rows = await conn.fetch(
        f"""
        SELECT {_DOCUMENT_COLUMNS} FROM documents d WHERE d.doc_id > $1 ORDER BY d.doc_id OFFSET $2 LIMIT $3
        """,
        "" if after is None else after,
        offset,
        limit + 1,
    )
    total = int(await conn.fetchval("SELECT count(*) FROM documents"))
    documents = [_document(r) for r in rows[:limit]]
    next_cursor = encode_cursor(documents[-1].doc_id) if len(rows) > limit else None
    return DocumentPage(documents, total, next_cursor)
