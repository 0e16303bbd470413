"""What is asyncpg's in the store's records: the connection type its statements run on, and a search row as a
`ChunkHit` (the records themselves are the shared vocabulary, `tools.records`)."""

from __future__ import annotations

import json

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tools.records import ChunkHit

Conn = asyncpg.Connection | PoolConnectionProxy
"""A connection, pooled or not."""


def hit(row: asyncpg.Record) -> ChunkHit:
    """The ChunkHit of a search row (columns `chunk_id, doc_id, title, text, source, metadata, score`)."""
    return ChunkHit(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        title=row["title"],
        text=row["text"],
        source=row["source"],
        score=float(row["score"]),
        metadata=json.loads(row["metadata"]),
    )
