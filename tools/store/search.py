"""The three searches (dense HNSW, full text by BM25 or `ts_rank_cd`, cosine lookups by chunk id), each one
statement on a connection whose transaction carries the search settings (`settings_sql`).

The settings travel per transaction (`SET LOCAL`), never as connection start-up parameters: PgBouncer in
transaction mode refuses those (`unsupported startup parameter`) or drops them (`ignore_startup_parameters`), and a
server connection it hands out may have been set by another client. `plan_cache_mode = force_custom_plan` makes a
prepared search statement planned with its actual parameters on every execution, so it never switches to a generic
plan that ignores `LIMIT` and drops the HNSW index scan (measured: FACTS.md, "Measured on the product").
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from tools import bm25
from tools.store.errors import StoreError
from tools.store.records import ChunkHit, Conn, FullTextMatch, FullTextRank, hit

HIT_COLUMNS = "c.chunk_id, d.doc_id, d.title, c.text, d.source, c.metadata"

DENSE_SQL = f"""
SELECT {HIT_COLUMNS}, 1 - (c.embedding <=> $1) AS score
FROM chunks c JOIN documents d ON d.id = c.document_id
ORDER BY c.embedding <=> $1
LIMIT $2
"""
"""Dense search: $1 query vector, $2 top_k."""

DENSE_FILTERED_SQL = f"""
SELECT {HIT_COLUMNS}, 1 - (c.embedding <=> $1) AS score
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE d.metadata @> $3::jsonb
ORDER BY c.embedding <=> $1
LIMIT $2
"""
"""Dense search with a metadata filter: $1 query vector, $2 top_k, $3 JSON object the metadata must contain."""

BM25_SQL = bm25.pruned_sql(HIT_COLUMNS)
"""Pruned BM25: $1 query text, $2 top_k, $3 k1, $4 b, $5 postings read per term."""

BM25_EXHAUSTIVE_SQL = bm25.exhaustive_sql(HIT_COLUMNS)
"""Exhaustive BM25: $1 query text, $2 top_k, $3 k1, $4 b."""

_TSQUERY = {
    "all": "websearch_to_tsquery('english', $1)",
    "any": "replace(plainto_tsquery('english', $1)::text, ' & ', ' | ')::tsquery",
}


def settings_sql(ef_search: int, exact: bool = False) -> str:
    """The `SET LOCAL` statements of a search transaction: `hnsw.ef_search` (an int, 1..1000), pgvector 0.8's
    iterative index scan (`strict_order`: a filtered search keeps scanning until enough rows pass the filter; an
    unfiltered one is unchanged), custom plans for every prepared statement, and with `exact` no index scans."""
    if not 1 <= int(ef_search) <= 1000:
        raise StoreError(f"ef_search={ef_search}; expected 1..1000")
    statements = [
        f"SET LOCAL hnsw.ef_search = {int(ef_search)}",
        "SET LOCAL hnsw.iterative_scan = strict_order",
        "SET LOCAL plan_cache_mode = force_custom_plan",
    ]
    if exact:
        statements.append("SET LOCAL enable_indexscan = off")
    return "; ".join(statements)


def check_query(query: npt.NDArray[np.float32], dim: int) -> None:
    """Raise StoreError when `query` is not a finite `(dim,)` vector."""
    if query.shape != (dim,):
        raise StoreError(f"query embedding: expected shape ({dim},), got {query.shape}")
    if not np.isfinite(query).all():
        raise StoreError("query embedding has non-finite values (NaN or inf); expected a finite vector")


def check_top_k(top_k: int) -> None:
    """Raise StoreError when `top_k` is outside 1..1000."""
    if not 1 <= top_k <= 1000:
        raise StoreError(f"top_k={top_k}; expected 1..1000")


def check_full_text(match: str, rank: str) -> None:
    """Raise StoreError for an unknown full-text `match` or `rank`."""
    if rank not in ("bm25", "bm25_exhaustive", "ts_rank_cd") or match not in ("all", "any"):
        raise StoreError(
            f"full-text rank={rank!r}, match={match!r}; expected bm25|bm25_exhaustive|ts_rank_cd and all|any"
        )


async def dense(
    conn: Conn, query: npt.NDArray[np.float32], top_k: int, metadata_filter: dict[str, Any] | None
) -> list[ChunkHit]:
    """Nearest chunks by cosine distance (see `VectorStore.dense_search`)."""
    if metadata_filter is None:
        rows = await conn.fetch(DENSE_SQL, query, top_k)
    else:
        rows = await conn.fetch(DENSE_FILTERED_SQL, query, top_k, json.dumps(metadata_filter))
    return [hit(r) for r in rows]


async def full_text(
    conn: Conn,
    query: str,
    top_k: int,
    match: FullTextMatch,
    rank: FullTextRank,
    k1: float,
    b: float,
    postings_per_term: int,
) -> list[ChunkHit]:
    """Chunks matching the query's `english` lexemes, ranked (see `VectorStore.full_text_search`)."""
    if rank == "bm25":
        rows = await conn.fetch(BM25_SQL, query, top_k, k1, b, max(postings_per_term, top_k))
    elif rank == "bm25_exhaustive":
        rows = await conn.fetch(BM25_EXHAUSTIVE_SQL, query, top_k, k1, b)
    else:
        rows = await conn.fetch(
            f"""
            SELECT {HIT_COLUMNS}, ts_rank_cd(c.tsv, query.q) AS score
            FROM chunks c JOIN documents d ON d.id = c.document_id, (SELECT {_TSQUERY[match]} AS q) AS query
            WHERE c.tsv @@ query.q
            ORDER BY score DESC, c.id
            LIMIT $2
            """,
            query,
            top_k,
        )
    return [hit(r) for r in rows]


async def cosine_similarities(conn: Conn, query: npt.NDArray[np.float32], chunk_ids: list[str]) -> dict[str, float]:
    """{chunk_id: cosine similarity} of the stored `chunk_ids` (a lookup by the unique chunk id index)."""
    rows = await conn.fetch(
        "SELECT chunk_id, 1 - (embedding <=> $1) AS score FROM chunks WHERE chunk_id = ANY($2::text[])",
        query,
        chunk_ids,
    )
    return {r["chunk_id"]: float(r["score"]) for r in rows}


async def get_document(conn: Conn, doc_id: str) -> tuple[str, str] | None:
    """(title, full text) of `doc_id`, its chunks joined in order; None when not stored."""
    rows = await conn.fetch(
        """
        SELECT d.title, c.text FROM documents d JOIN chunks c ON c.document_id = d.id
        WHERE d.doc_id = $1 ORDER BY c.chunk_index
        """,
        doc_id,
    )
    if not rows:
        return None
    return rows[0]["title"], "\n".join(r["text"] for r in rows)
