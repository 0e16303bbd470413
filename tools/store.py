"""Chunks, vectors and full-text in PostgreSQL + pgvector, through an asyncpg pool.

Schema (created idempotently by `VectorStore.connect`):
- `rag_meta(key, value)`: the embedder model and dimension the table was built for;
- `documents(id, doc_id UNIQUE, title, source, metadata jsonb, content_hash)`;
- `chunks(id, chunk_id UNIQUE, document_id -> documents, chunk_index, text, token_count, embedding vector(dim),
  tsv tsvector GENERATED from the chunk text)`, an HNSW index (`vector_cosine_ops`, pgvector 0.8) on `embedding`
  and a GIN index on `tsv`.

Writes happen one transaction per batch of documents; a document whose (doc_id, content hash) is already stored is
skipped, so re-ingesting the same content adds nothing, and a changed document replaces its old chunks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg
import numpy as np
import numpy.typing as npt
from asyncpg.pool import PoolConnectionProxy
from pgvector.asyncpg import register_vector

Conn = asyncpg.Connection | PoolConnectionProxy
"""A connection, pooled or not."""

FullTextMatch = Literal["all", "any"]
"""Full-text query form: every term (`all`) or any term (`any`)."""
FullTextRank = Literal["bm25", "ts_rank_cd"]
"""Full-text ranking: Okapi BM25 over the stored lexemes, or Postgres' `ts_rank_cd`."""


class StoreError(RuntimeError):
    """The store cannot be used as asked: unreachable, wrong embedder for the stored table, or bad input."""


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk to store: its text, embedding `(dim,)` float32 and token count."""

    chunk_index: int
    text: str
    token_count: int
    embedding: npt.NDArray[np.float32]


@dataclass(frozen=True)
class DocumentRecord:
    """One document to store with its chunks; (doc_id, `content_hash` sha256 hex) keys idempotent ingestion."""

    doc_id: str
    title: str
    source: str
    content_hash: str
    chunks: list[ChunkRecord]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkHit:
    """A retrieved chunk. `score` is cosine similarity for dense search, `ts_rank_cd` for full-text."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    source: str
    score: float


@dataclass(frozen=True)
class IngestCounts:
    """What one `add_documents` call did: documents added, skipped (hash already stored), chunks written."""

    added: int = 0
    skipped: int = 0
    chunks: int = 0


@dataclass(frozen=True)
class StoredDocument:
    """One stored document: ids, title, source, number of chunks, content hash (sha256 hex) and when it was
    ingested (UTC, `timestamptz`; a replaced document gets the time of its replacement)."""

    doc_id: str
    title: str
    source: str
    chunks: int
    content_hash: str
    ingested_at: datetime


_HIT_COLUMNS = "c.chunk_id, d.doc_id, d.title, c.text, d.source"


class VectorStore:
    """asyncpg pool over the chunk store for one embedder.

    Args:
        dsn: `postgresql://` URL of a server with the `vector` extension available.
        model_name: embedder model name recorded with the table.
        dim: embedding width, e.g. 384.
        max_pool_size: most pooled connections.
    """

    def __init__(self, dsn: str, model_name: str, dim: int, max_pool_size: int = 8) -> None:
        self.dsn = dsn
        self.model_name = model_name
        self.dim = dim
        self.max_pool_size = max_pool_size
        self._pool: asyncpg.Pool | None = None

    async def __aenter__(self) -> VectorStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pool(self) -> asyncpg.Pool:
        """The open pool. Raises StoreError when not connected."""
        if self._pool is None:
            raise StoreError("VectorStore is not connected; use `async with` or call connect()")
        return self._pool

    async def connect(self) -> None:
        """Create the extension and schema if missing, open the pool, check the stored embedder.

        Raises:
            StoreError: the server is unreachable, or the table was built for another embedder model or
                dimension (names both; nothing is written).
        """
        try:
            setup = await asyncpg.connect(self.dsn)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot connect to Postgres at {self.dsn}: {exc}") from exc
        try:
            async with setup.transaction():
                await setup.execute("SELECT pg_advisory_xact_lock(4242)")  # serialise concurrent schema set-up
                await setup.execute("CREATE EXTENSION IF NOT EXISTS vector")
                await setup.execute("CREATE TABLE IF NOT EXISTS rag_meta (key text PRIMARY KEY, value text NOT NULL)")
                rows = await setup.fetch("SELECT key, value FROM rag_meta")
                stored: dict[str, str] = {r["key"]: r["value"] for r in rows}
                if stored and (stored.get("embedder_model"), stored.get("dim")) != (self.model_name, str(self.dim)):
                    raise StoreError(
                        f"the store holds embeddings of model {stored.get('embedder_model')!r} "
                        f"(dim {stored.get('dim')}); the configured embedder is {self.model_name!r} (dim {self.dim}). "
                        f"Use another database or re-create this one."
                    )
                if not stored:
                    await setup.executemany(
                        "INSERT INTO rag_meta (key, value) VALUES ($1, $2)",
                        [("embedder_model", self.model_name), ("dim", str(self.dim))],
                    )
                    await setup.execute(_schema_sql(self.dim))
                await setup.execute(
                    "ALTER TABLE documents ADD COLUMN IF NOT EXISTS ingested_at timestamptz NOT NULL DEFAULT now()"
                )
                await setup.execute("CREATE INDEX IF NOT EXISTS documents_source ON documents (source)")
        finally:
            await setup.close()
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.max_pool_size, init=_init_conn)

    async def close(self) -> None:
        """Close the pool (idempotent)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def stored_versions(self, doc_ids: list[str]) -> dict[str, str]:
        """doc_id -> stored content hash, for those of `doc_ids` that are stored."""
        rows = await self.pool.fetch(
            "SELECT doc_id, content_hash FROM documents WHERE doc_id = ANY($1::text[])", doc_ids
        )
        return {r["doc_id"]: r["content_hash"] for r in rows}

    async def add_documents(self, docs: list[DocumentRecord]) -> IngestCounts:
        """Store `docs` and their chunks in one transaction; a document stored with the same content hash is
        skipped, one stored with another hash is replaced (old chunks deleted) in the same transaction.

        Raises:
            StoreError: duplicate doc ids in `docs`, or an embedding with the wrong shape or non-finite values
                (names the chunk); nothing is written.
        """
        if len({d.doc_id for d in docs}) != len(docs):
            raise StoreError("duplicate doc_id within one batch; expected unique document ids")
        for doc in docs:
            for chunk in doc.chunks:
                if chunk.embedding.shape != (self.dim,) or not np.isfinite(chunk.embedding).all():
                    raise StoreError(
                        f"chunk {doc.doc_id}#{chunk.chunk_index}: expected a finite ({self.dim},) embedding, "
                        f"got shape {chunk.embedding.shape}"
                    )
        async with self.pool.acquire() as conn, conn.transaction():
            await _lock_writes(conn)
            stored = {
                r["doc_id"]: r["content_hash"]
                for r in await conn.fetch(
                    "SELECT doc_id, content_hash FROM documents WHERE doc_id = ANY($1::text[]) FOR UPDATE",
                    [d.doc_id for d in docs],
                )
            }
            new_docs = {d.doc_id: d for d in docs if stored.get(d.doc_id) != d.content_hash}
            if not new_docs:
                return IngestCounts(skipped=len(docs))
            await conn.execute("DELETE FROM documents WHERE doc_id = ANY($1::text[])", list(new_docs))
            rows = await conn.fetch(
                """
                INSERT INTO documents (doc_id, title, source, metadata, content_hash)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[])
                RETURNING id, doc_id
                """,
                [d.doc_id for d in new_docs.values()],
                [d.title for d in new_docs.values()],
                [d.source for d in new_docs.values()],
                [json.dumps(d.metadata) for d in new_docs.values()],
                [d.content_hash for d in new_docs.values()],
            )
            ids = {r["doc_id"]: r["id"] for r in rows}
            records = [
                (ids[doc.doc_id], f"{doc.doc_id}#{c.chunk_index}", c.chunk_index, c.text, c.token_count, c.embedding)
                for doc in new_docs.values()
                for c in doc.chunks
            ]
            await conn.copy_records_to_table(
                "chunks",
                records=records,
                columns=["document_id", "chunk_id", "chunk_index", "text", "token_count", "embedding"],
            )
        return IngestCounts(added=len(new_docs), skipped=len(docs) - len(new_docs), chunks=len(records))

    async def list_documents(self, limit: int | None = None, offset: int = 0) -> list[StoredDocument]:
        """Stored documents ordered by `doc_id`, `limit` of them (all when None) after skipping `offset`.

        Raises:
            StoreError: negative `limit` or `offset`, or the query failed.
        """
        if (limit is not None and limit < 0) or offset < 0:
            raise StoreError(f"limit={limit}, offset={offset}; expected limit >= 0 (or None) and offset >= 0")
        try:
            rows = await self.pool.fetch(
                """
                SELECT d.doc_id, d.title, d.source, d.content_hash, d.ingested_at,
                    (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks
                FROM documents d ORDER BY d.doc_id LIMIT $1 OFFSET $2
                """,
                limit,
                offset,
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"listing documents failed: {exc}") from exc
        return [
            StoredDocument(r["doc_id"], r["title"], r["source"], int(r["chunks"]), r["content_hash"], r["ingested_at"])
            for r in rows
        ]

    async def delete_documents(self, doc_ids: Sequence[str] = (), source: str | None = None) -> list[str]:
        """Delete the documents named in `doc_ids` and (when given) every document whose `source` equals `source`,
        with their chunks and full-text postings, in one transaction.

        Returns:
            The doc ids actually deleted, sorted (names that were not stored are left out).

        Raises:
            StoreError: `doc_ids` is a single string (expected a sequence of ids), or the transaction failed
                (then nothing was deleted).
        """
        if isinstance(doc_ids, str):
            raise StoreError(f"doc_ids={doc_ids!r}; expected a sequence of document ids, not one string")
        ids = list(doc_ids)
        if not ids and source is None:
            return []
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await _lock_writes(conn)
                rows = await conn.fetch(
                    """
                    SELECT id, doc_id FROM documents
                    WHERE doc_id = ANY($1::text[]) OR ($2::text IS NOT NULL AND source = $2::text)
                    ORDER BY doc_id FOR UPDATE
                    """,
                    ids,
                    source,
                )
                await _delete_rows(conn, [r["id"] for r in rows])
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"deleting documents failed, nothing was deleted: {exc}") from exc
        return [r["doc_id"] for r in rows]

    async def count(self) -> tuple[int, int]:
        """(documents, chunks) stored."""
        row = await self.pool.fetchrow(
            "SELECT (SELECT count(*) FROM documents) AS docs, (SELECT count(*) FROM chunks) AS chunks"
        )
        assert row is not None
        return int(row["docs"]), int(row["chunks"])

    async def dense_search(
        self,
        query: npt.NDArray[np.float32],
        top_k: int,
        ef_search: int = 100,
        metadata_filter: dict[str, Any] | None = None,
        exact: bool = False,
    ) -> list[ChunkHit]:
        """Nearest chunks by cosine distance through the HNSW index (or an exact scan).

        Args:
            query: `(dim,)` float32, L2-normalised.
            top_k: rows wanted (1..1000).
            ef_search: HNSW candidate list size (pgvector `hnsw.ef_search`, at most 1000); raised to `top_k` if
                smaller, since it caps the rows one index scan returns.
            metadata_filter: only documents whose `metadata` contains this JSON object (`@>`). pgvector 0.8's
                iterative index scan (`hnsw.iterative_scan = strict_order`) keeps scanning the graph until
                `top_k` rows pass the filter (or `hnsw.max_scan_tuples`, 20,000 by default, are visited), so the
                result has min(top_k, matching chunks) rows in exact distance order.
            exact: disable index scans (`enable_indexscan = off`): a sequential scan ranks every chunk, the
                ground truth for HNSW recall.

        Returns:
            Up to `top_k` hits, best first; `score` = cosine similarity in [-1, 1].

        Raises:
            StoreError: wrong query shape or top_k outside 1..1000.
        """
        if query.shape != (self.dim,):
            raise StoreError(f"query embedding: expected shape ({self.dim},), got {query.shape}")
        if not 1 <= top_k <= 1000:
            raise StoreError(f"top_k={top_k}; expected 1..1000")
        ef = min(max(int(ef_search), int(top_k)), 1000)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
            if metadata_filter is not None:
                await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            if exact:
                await conn.execute("SET LOCAL enable_indexscan = off")
            rows = await conn.fetch(
                f"""
                SELECT {_HIT_COLUMNS}, 1 - (c.embedding <=> $1) AS score
                FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE $3::jsonb IS NULL OR d.metadata @> $3::jsonb
                ORDER BY c.embedding <=> $1
                LIMIT $2
                """,
                query,
                top_k,
                None if metadata_filter is None else json.dumps(metadata_filter),
            )
        return [_hit(r) for r in rows]

    async def cosine_similarities(self, query: npt.NDArray[np.float32], chunk_ids: list[str]) -> dict[str, float]:
        """Cosine similarity of `query` to the stored embeddings of `chunk_ids` (a lookup by the unique chunk id
        index, no vector index scan), e.g. for chunks full-text search found.

        Args:
            query: `(dim,)` float32, L2-normalised.

        Returns:
            {chunk_id: cosine similarity in [-1, 1]} for the ids that are stored (unknown ids are left out).

        Raises:
            StoreError: wrong query shape.
        """
        if query.shape != (self.dim,):
            raise StoreError(f"query embedding: expected shape ({self.dim},), got {query.shape}")
        if not chunk_ids:
            return {}
        rows = await self.pool.fetch(
            "SELECT chunk_id, 1 - (embedding <=> $1) AS score FROM chunks WHERE chunk_id = ANY($2::text[])",
            query,
            chunk_ids,
        )
        return {r["chunk_id"]: float(r["score"]) for r in rows}

    async def full_text_search(
        self,
        query: str,
        top_k: int,
        match: FullTextMatch = "all",
        rank: FullTextRank = "ts_rank_cd",
        k1: float = 0.9,
        b: float = 0.4,
    ) -> list[ChunkHit]:
        """Chunks matching the query's `english` lexemes (stored `tsvector`, GIN index), ranked.

        Args:
            query: free text.
            top_k: rows wanted.
            match: for `ts_rank_cd`: `all` = `websearch_to_tsquery('english', query)` (every term must occur;
                quotes and `-term` work as on a web search engine); `any` = the same lexemes as `plainto_tsquery`
                joined by OR (`|`), which suits long natural-language queries such as claims. BM25 always
                matches any lexeme.
            rank: `ts_rank_cd` (Postgres cover density, no corpus statistics) or `bm25`: Okapi BM25 in Lucene's
                form (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009):
                sum over the query's distinct lexemes t of idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl)),
                idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)); tf = occurrences of t in the chunk's `tsvector`,
                df = chunks containing t (counted through the GIN index), N = chunks, dl = the chunk's
                `token_count` (embedder tokens: only the ratio dl / avgdl enters).
            k1, b: BM25 parameters; defaults 0.9 and 0.4 are Anserini's (BEIR's BM25 baseline).

        Returns:
            Up to `top_k` hits, best first (ties by insertion order); `score` = the rank function's value.

        Raises:
            StoreError: unknown `match` or `rank`.
        """
        if rank == "bm25":
            rows = await self.pool.fetch(_BM25_SQL, query, top_k, float(k1), float(b))
            return [_hit(r) for r in rows]
        if rank != "ts_rank_cd" or match not in ("all", "any"):
            raise StoreError(f"full-text rank={rank!r}, match={match!r}; expected bm25|ts_rank_cd and all|any")
        tsquery = {
            "all": "websearch_to_tsquery('english', $1)",
            "any": "replace(plainto_tsquery('english', $1)::text, ' & ', ' | ')::tsquery",
        }[match]
        rows = await self.pool.fetch(
            f"""
            SELECT {_HIT_COLUMNS}, ts_rank_cd(c.tsv, query.q) AS score
            FROM chunks c JOIN documents d ON d.id = c.document_id, (SELECT {tsquery} AS q) AS query
            WHERE c.tsv @@ query.q
            ORDER BY score DESC, c.id
            LIMIT $2
            """,
            query,
            top_k,
        )
        return [_hit(r) for r in rows]

    async def get_document(self, doc_id: str) -> tuple[str, str] | None:
        """(title, full text) of document `doc_id`, its chunks joined in order without overlap markers."""
        rows = await self.pool.fetch(
            """
            SELECT d.title, c.text FROM documents d JOIN chunks c ON c.document_id = d.id
            WHERE d.doc_id = $1 ORDER BY c.chunk_index
            """,
            doc_id,
        )
        if not rows:
            return None
        return rows[0]["title"], "\n".join(r["text"] for r in rows)


async def _lock_writes(conn: Conn) -> None:
    """Serialise writers (ingest, replace, delete) for the rest of the transaction: they read the stored versions
    after the lock, so a concurrent writer's committed rows are seen, and corpus statistics stay exact."""
    await conn.execute("SELECT pg_advisory_xact_lock(4243)")


async def _delete_rows(conn: Conn, ids: list[int]) -> None:
    """Delete documents by primary key `ids` with their chunks (ON DELETE CASCADE), inside the caller's
    transaction."""
    if ids:
        await conn.execute("DELETE FROM documents WHERE id = ANY($1::bigint[])", ids)


async def _init_conn(conn: asyncpg.Connection) -> None:
    await register_vector(conn)


def _hit(row: asyncpg.Record) -> ChunkHit:
    return ChunkHit(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        title=row["title"],
        text=row["text"],
        source=row["source"],
        score=float(row["score"]),
    )


def _schema_sql(dim: int) -> str:
    return f"""
    CREATE TABLE IF NOT EXISTS documents (
        id bigserial PRIMARY KEY,
        doc_id text NOT NULL UNIQUE,
        title text NOT NULL DEFAULT '',
        source text NOT NULL DEFAULT '',
        metadata jsonb NOT NULL DEFAULT '{{}}',
        content_hash text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        ingested_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE IF NOT EXISTS chunks (
        id bigserial PRIMARY KEY,
        chunk_id text NOT NULL UNIQUE,
        document_id bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        chunk_index integer NOT NULL,
        text text NOT NULL,
        token_count integer NOT NULL,
        embedding vector({dim}) NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
        UNIQUE (document_id, chunk_index)
    );
    CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops);
    CREATE INDEX IF NOT EXISTS chunks_tsv_gin ON chunks USING gin (tsv);
    """


# BM25 over the stored tsvectors ($1 query text, $2 top_k, $3 k1, $4 b); see `VectorStore.full_text_search`.
# Each query lexeme becomes a one-term tsquery, quoted for tsquery input (chr(39) = ', chr(92) = \).
_BM25_SQL = f"""
WITH terms AS (
    SELECT DISTINCT u.lexeme,
        (chr(39) || replace(replace(u.lexeme, chr(92), chr(92) || chr(92)), chr(39), chr(39) || chr(39))
            || chr(39))::tsquery AS tq
    FROM unnest(to_tsvector('english', $1)) AS u
), stats AS (
    SELECT count(*)::float8 AS n, greatest(avg(token_count), 1)::float8 AS avgdl FROM chunks
), idf AS (
    SELECT t.lexeme, ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM terms t CROSS JOIN stats s
    CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM chunks c WHERE c.tsv @@ t.tq) d
), any_term AS (
    SELECT string_agg(tq::text, ' | ')::tsquery AS q FROM terms
), scored AS (
    SELECT c.id, sum(
        i.idf * cardinality(u.positions)
        / (cardinality(u.positions) + $3 * (1 - $4 + $4 * c.token_count / s.avgdl))
    ) AS score
    FROM chunks c CROSS JOIN any_term a CROSS JOIN stats s
    CROSS JOIN LATERAL unnest(c.tsv) AS u
    JOIN idf i ON i.lexeme = u.lexeme
    WHERE c.tsv @@ a.q
    GROUP BY c.id
)
SELECT {_HIT_COLUMNS}, sc.score
FROM scored sc JOIN chunks c ON c.id = sc.id JOIN documents d ON d.id = c.document_id
ORDER BY sc.score DESC, c.id
LIMIT $2
"""
