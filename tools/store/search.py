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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tools import bm25
from tools.errors import StoreError
from tools.language import query_configs
from tools.records import ChunkHit, FullTextMatch, FullTextRank, TermVectors
from tools.scope import SearchScope
from tools.store import filters
from tools.store.records import Conn, hit

HIT_COLUMNS = "c.chunk_id, d.doc_id, d.title, c.text, d.source, c.metadata"

EXACT_BELOW_CHUNKS = 1000
"""A filtered dense search ranks every matching chunk exactly (index scans off, so no HNSW scan) when fewer than
this many chunks pass the filter (a capped count that stops here); above, pgvector's iterative HNSW scan. Measured
on a synthetic 8.9k-chunk store (and checked by `rag bench query --filter-selectivity`) (docs/filters.md): up to
~1,000 matching chunks the exact ranking costs about what the filtered HNSW scan does, and it cannot miss a match
or under-fill, which an HNSW scan of a selective filter can (`hnsw.max_scan_tuples`)."""

BM25_EXHAUSTIVE_BELOW_CHUNKS = 3000
"""A filtered pruned BM25 search scores every posting of the matching chunks (`bm25_exhaustive` over the filtered
set) when fewer than this many chunks pass the filter; above, it reads each term's top M postings among them.
Measured (docs/filters.md): reading a term's top M postings that pass a filter reads about M / selectivity
postings, which cost more than scoring the filtered chunks directly up to ~3,000 matching chunks."""


def dense_sql(where: str | None = None) -> str:
    """Dense search: $1 query vector, $2 top_k; with `where` (a condition on the document `d`, its parameters
    from $3) only chunks of documents that pass it."""
    condition = f"WHERE {where}" if where else ""
    return f"""
SELECT {HIT_COLUMNS}, 1 - (c.embedding <=> $1) AS score
FROM chunks c JOIN documents d ON d.id = c.document_id
{condition}
ORDER BY c.embedding <=> $1
LIMIT $2
"""


def matching_chunks_sql(where: str) -> str:
    """How many chunks pass `where` (parameters from $2), counting at most $1: a capped count, whose cost is
    bounded by the cap on a filter that many chunks pass."""
    return f"""
SELECT count(*) FROM (
    SELECT 1 FROM documents d JOIN chunks c ON c.document_id = d.id WHERE {where} LIMIT $1
) AS matching
"""


DENSE_SQL = dense_sql()
"""Dense search: $1 query vector, $2 top_k."""

DENSE_FILTERED_SQL = dense_sql(filters.where_sql(None, 3, {}).sql)
"""Dense search with a metadata filter: $1 query vector, $2 top_k, $3 JSON object the metadata must contain."""

BM25_SQL = bm25.pruned_sql(HIT_COLUMNS)
"""Pruned BM25: $1 query text, $2 top_k, $3 k1, $4 b, $5 postings read per term."""

BM25_EXHAUSTIVE_SQL = bm25.exhaustive_sql(HIT_COLUMNS)
"""Exhaustive BM25: $1 query text, $2 top_k, $3 k1, $4 b."""

_TSQUERY = {
    "all": "websearch_to_tsquery('{config}', cjk_bigrams($1))",
    "any": "replace(plainto_tsquery('{config}', cjk_bigrams($1))::text, ' & ', ' | ')::tsquery",
}
"""The `ts_rank_cd` query of each match form, in the query's own text search configuration (`{config}`: one of
`tools.language`'s fixed names, never user input)."""


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


def restricted(scope: SearchScope | None) -> bool:
    """True when `scope` is read by a restricted caller: row-level security (`tools.store.access`) then hides the
    chunks of documents it may not read, so a search treats it like a filter (each term's top postings are read
    among the chunks it may read; a dense scan that the policy left short is ranked exactly)."""
    return scope is not None and not scope.access.unrestricted


async def fewer_match(conn: Conn, scope: SearchScope | None, contains: Mapping[str, Any] | None, below: int) -> bool:
    """True when fewer than `below` chunks pass the filter (a capped count: it stops counting at `below`)."""
    where = filters.where_sql(scope, 2, contains)
    cap = below
    return int(await conn.fetchval(matching_chunks_sql(where.sql), cap, *where.params)) < cap


async def exact_scans(conn: Conn) -> None:
    """No index scans for the rest of this search's transaction: a filtered dense search ranks every chunk that
    passes the filter (through the documents' and chunks' bitmap scans, never the HNSW index)."""
    await conn.execute("SET LOCAL enable_indexscan = off")


async def dense(
    conn: Conn,
    query: npt.NDArray[np.float32],
    top_k: int,
    metadata_filter: Mapping[str, Any] | None,
    scope: SearchScope | None = None,
    exact: bool = False,
) -> list[ChunkHit]:
    """Nearest chunks by cosine distance of the documents in `scope` whose metadata contains `metadata_filter`
    (see `VectorStore.dense_search`); `exact`: this transaction already has index scans off.

    A filtered search never under-fills: below `EXACT_BELOW_CHUNKS` matching chunks it ranks them all exactly;
    above, it takes pgvector's iterative HNSW scan, and ranks exactly after all when that scan returned fewer than
    `top_k` rows (it stops at `hnsw.max_scan_tuples`), since at least `top_k` chunks match."""
    where = filters.where_sql(scope, 3, metadata_filter)
    if not where.narrows:
        rows = await conn.fetch(DENSE_SQL, query, top_k)
        if restricted(scope) and not exact and len(rows) < top_k:  # the policy hid more than the scan visited
            await exact_scans(conn)
            rows = await conn.fetch(DENSE_SQL, query, top_k)
        return [hit(r) for r in rows]
    sql = dense_sql(where.sql)
    if not exact and await fewer_match(conn, scope, metadata_filter, max(EXACT_BELOW_CHUNKS, top_k)):
        await exact_scans(conn)
        exact = True
    rows = await conn.fetch(sql, query, top_k, *where.params)
    if not exact and len(rows) < top_k:
        await exact_scans(conn)
        rows = await conn.fetch(sql, query, top_k, *where.params)
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
    scope: SearchScope | None = None,
    terms: Mapping[str, float] | None = None,
) -> list[ChunkHit]:
    """Chunks matching the query's lexemes (`query_lexemes`: in each of its languages) of the documents in `scope`,
    ranked (see `VectorStore.full_text_search`; `ts_rank_cd` analyses it in its own language's configuration); with
    `terms` ({stored lexeme: query weight}, BM25 ranks only), those lexemes,
    each term's BM25 contribution times its weight, instead of `query`'s.

    With a filter, pruned BM25 reads each term's top M postings among the chunks that pass it, or, when fewer
    than `BM25_EXHAUSTIVE_BELOW_CHUNKS` chunks pass, scores every posting of the filtered chunks
    (`bm25_exhaustive`). A restricted caller with no filter of its own reads the store's top M postings per term,
    scored among its own chunks (`bm25.pruned_sql(readable=True)`), and takes the filtered read only when fewer than
    `top_k` of them are its own."""
    narrows = filters.where_sql(scope, 1).narrows or restricted(scope)
    weighted = terms is not None
    if weighted and rank == "ts_rank_cd":
        raise StoreError("weighted query terms need a BM25 rank (bm25 or bm25_exhaustive), not ts_rank_cd")
    if terms is None and rank != "ts_rank_cd":  # the query's lexemes in each of its languages, weight 1 each
        terms = dict.fromkeys(await query_lexemes(conn, query), 1.0)
        weighted = True
    text = json.dumps(dict(terms)) if terms is not None else query
    if rank == "bm25" and restricted(scope) and not filters.where_sql(scope, 1).narrows:
        # only row-level security narrows: the store's top postings, the caller's chunks among them; the filtered
        # read below only when fewer than top_k of them are the caller's (it never under-fills)
        sql = bm25.pruned_sql(HIT_COLUMNS, None, weighted, readable=True)
        rows = await conn.fetch(sql, text, top_k, k1, b, max(postings_per_term, top_k))
        if len(rows) >= top_k:
            return [hit(r) for r in rows]
    if rank == "bm25" and narrows and await fewer_match(conn, scope, None, BM25_EXHAUSTIVE_BELOW_CHUNKS):
        rank = "bm25_exhaustive"
    if rank == "bm25":
        where = filters.where_sql(scope, 6)
        sql = bm25.pruned_sql(HIT_COLUMNS, where.sql if narrows else None, weighted)
        rows = await conn.fetch(sql, text, top_k, k1, b, max(postings_per_term, top_k), *where.params)
    elif rank == "bm25_exhaustive":
        where = filters.where_sql(scope, 5)
        sql = bm25.exhaustive_sql(HIT_COLUMNS, where.sql if narrows else None, weighted)
        rows = await conn.fetch(sql, text, top_k, k1, b, *where.params)
    else:
        where = filters.where_sql(scope, 3)
        tsquery = _TSQUERY[match].format(config=query_configs(query)[-1])
        rows = await conn.fetch(
            f"""
            SELECT {HIT_COLUMNS}, ts_rank_cd(c.tsv, query.q) AS score
            FROM chunks c JOIN documents d ON d.id = c.document_id, (SELECT {tsquery} AS q) AS query
            WHERE c.tsv @@ query.q AND {where.sql}
            ORDER BY score DESC, c.id
            LIMIT $2
            """,
            query,
            top_k,
            *where.params,
        )
    return [hit(r) for r in rows]


async def query_lexemes(conn: Conn, query: str) -> list[str]:
    """The distinct lexemes of `query` in each of its text search configurations (`tools.language.query_configs`:
    `english`, its own language's, `simple` for CJK), its CJK runs as bigrams (`cjk_bigrams`, as the chunks' `tsv`
    are built), sorted."""
    return list(
        await conn.fetchval(
            """
            SELECT array(
                SELECT DISTINCT u.lexeme
                FROM unnest($2::text[]) AS cfg
                CROSS JOIN LATERAL unnest(to_tsvector(cfg::regconfig, cjk_bigrams($1))) AS u
                ORDER BY 1
            )
            """,
            query,
            query_configs(query),
        )
    )


async def term_vectors(conn: Conn, chunk_ids: Sequence[str]) -> TermVectors:
    """The stored BM25 term statistics of `chunk_ids` (see `TermVectors`): their lexemes' counts, those lexemes'
    document frequencies and the corpus size, read from the BM25 tables (`tools.bm25`) in one statement each."""
    rows = await conn.fetch(
        """
        SELECT c.chunk_id, p.lexeme, p.tf, l.df
        FROM chunks c JOIN bm25_postings p ON p.chunk = c.id JOIN bm25_lexicon l ON l.lexeme = p.lexeme
        WHERE c.chunk_id = ANY($1::text[])
        """,
        list(chunk_ids),
    )
    n = int(await conn.fetchval("SELECT coalesce(max(chunks), 0) FROM bm25_corpus"))
    tf: dict[str, dict[str, int]] = {}
    df: dict[str, int] = {}
    for r in rows:
        tf.setdefault(r["chunk_id"], {})[r["lexeme"]] = int(r["tf"])
        df[r["lexeme"]] = int(r["df"])
    return TermVectors(n, tf, df)


async def cosine_similarities(conn: Conn, query: npt.NDArray[np.float32], chunk_ids: list[str]) -> dict[str, float]:
    """{chunk_id: cosine similarity} of the stored `chunk_ids` (a lookup by the unique chunk id index)."""
    rows = await conn.fetch(
        "SELECT chunk_id, 1 - (embedding <=> $1) AS score FROM chunks WHERE chunk_id = ANY($2::text[])",
        query,
        chunk_ids,
    )
    return {r["chunk_id"]: float(r["score"]) for r in rows}


async def get_document(conn: Conn, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
    """(title, full text) of `doc_id`, its chunks joined in order; None when not stored or outside `scope`. When
    several collections of `scope` hold a document `doc_id`, the first by collection name: one document's text,
    never two interleaved (narrow `scope` to a collection to choose)."""
    where = filters.where_sql(scope, 2)
    rows = await conn.fetch(
        f"""
        SELECT d.title, c.text FROM documents d JOIN chunks c ON c.document_id = d.id
        WHERE d.id = (SELECT d.id FROM documents d WHERE d.doc_id = $1 AND {where.sql} ORDER BY d.collection LIMIT 1)
        ORDER BY c.chunk_index
        """,
        doc_id,
        *where.params,
    )
    if not rows:
        return None
    return rows[0]["title"], "\n".join(r["text"] for r in rows)
