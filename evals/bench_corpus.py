"""The stored corpus as the query benchmarks copy it (`evals.bench_query`'s scaled database, `evals.bench_filters`'
tagged one): the copy's database name, and the stored documents read back page by page with their chunks and
embeddings."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import numpy as np

from tools.records import ChunkRecord, DocumentRecord
from tools.store import VectorStore

SCALE_PAGE_DOCS = 200
"""Documents read from the 1x store per page while copying it."""


def scaled_database_name(url: str, factor: int) -> str:
    """`<database of url>_x<factor>` (at most 63 characters, Postgres' identifier limit)."""
    base = urlsplit(url).path.lstrip("/") or "postgres"
    suffix = f"_x{factor}"
    return base[: 63 - len(suffix)] + suffix


async def stored_pages(store: VectorStore) -> AsyncIterator[list[DocumentRecord]]:
    """The stored documents with their chunks and embeddings, `SCALE_PAGE_DOCS` documents per page."""
    last_id = 0
    while True:
        docs = await store.pool.fetch(
            "SELECT id, doc_id, title, source, metadata::text AS metadata, content_hash FROM documents "
            "WHERE id > $1 ORDER BY id LIMIT $2",
            last_id,
            SCALE_PAGE_DOCS,
        )
        if not docs:
            return
        last_id = int(docs[-1]["id"])
        rows = await store.pool.fetch(
            "SELECT document_id, chunk_index, text, token_count, embedding FROM chunks "
            "WHERE document_id = ANY($1::bigint[]) ORDER BY document_id, chunk_index",
            [d["id"] for d in docs],
        )
        chunks: dict[int, list[ChunkRecord]] = {}
        for r in rows:
            vector = np.asarray(r["embedding"].to_numpy(), dtype=np.float32)  # pgvector.Vector
            chunks.setdefault(int(r["document_id"]), []).append(
                ChunkRecord(int(r["chunk_index"]), str(r["text"]), int(r["token_count"]), vector)
            )
        yield [
            DocumentRecord(
                str(d["doc_id"]),
                str(d["title"]),
                str(d["source"]),
                str(d["content_hash"]),
                chunks.get(int(d["id"]), []),
                json.loads(d["metadata"]),
            )
            for d in docs
        ]
