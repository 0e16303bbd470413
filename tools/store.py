"""Chunks, vectors and full-text in PostgreSQL + pgvector, through an asyncpg pool.

Schema (created idempotently by `VectorStore.connect`):
- `rag_meta(key, value)`: the embedder model and dimension the table was built for;
- `documents(id, doc_id UNIQUE, title, source, metadata jsonb, content_hash)`;
- `chunks(id, chunk_id UNIQUE, document_id -> documents, chunk_index, text, token_count, embedding vector(dim),
  tsv tsvector GENERATED from the chunk text)`, an HNSW index (`vector_cosine_ops`, pgvector 0.8) on `embedding`
  and a GIN index on `tsv`.

Plus the BM25 tables of `tools.bm25` (corpus statistics, lexicon, impact-ordered postings).

Writes happen one transaction per batch of documents; a document whose (doc_id, content hash) is already stored is
skipped, so re-ingesting the same content adds nothing, and a changed document replaces its old chunks. Writers
(ingest, replace, delete) are serialised by a transaction-level advisory lock, so the BM25 statistics stay exact
and two ingests of the same new doc id never collide.

Searches are one round trip each: the pool's connections carry the search settings as session defaults
(`hnsw.ef_search`, `hnsw.iterative_scan`, and `plan_cache_mode = force_custom_plan`, so that a prepared search
statement is planned with its actual parameters on every execution and never switches to a generic plan that
ignores `LIMIT` and drops the HNSW index scan).
"""

from __future__ import annotations

import functools
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

from tools import bm25

Conn = asyncpg.Connection | PoolConnectionProxy
"""A connection, pooled or not."""

FullTextMatch = Literal["all", "any"]
"""Full-text query form: every term (`all`) or any term (`any`)."""
FullTextRank = Literal["bm25", "bm25_exhaustive", "ts_rank_cd"]
"""Full-text ranking: Okapi BM25 by pruned impact-ordered postings (`bm25`), the same BM25 over every posting of
the query terms (`bm25_exhaustive`, cost grows with the corpus), or Postgres' `ts_rank_cd`."""


class StoreError(RuntimeError):
    """The store cannot be used as asked: unreachable, wrong embedder for the stored table, or bad input."""


class StoreUnavailableError(StoreError):
    """Postgres is unreachable, restarting or shutting down; the same call may succeed later (retryable)."""


class StoreBusyError(StoreUnavailableError):
    """No pooled connection became free within the bounded acquire time; retryable."""


class StoreQueryError(StoreError):
    """Postgres refused or failed a statement (a bug, a schema problem, or a missing extension); not retryable."""


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
    """A retrieved chunk. `score` is cosine similarity for dense search, BM25 or `ts_rank_cd` for full text."""

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


MAX_HNSW_DIM = 2000
"""Most dimensions pgvector's HNSW index takes for the `vector` type (pgvector 0.8 README)."""

_HIT_COLUMNS = "c.chunk_id, d.doc_id, d.title, c.text, d.source"


class VectorStore:
    """asyncpg pool over the chunk store for one embedder.

    Args:
        dsn: `postgresql://` URL of a server with the `vector` extension available.
        model_name: embedder model name recorded with the table.
        dim: embedding width, e.g. 384.
        max_pool_size: most pooled connections.
        ef_search: the connections' default `hnsw.ef_search` (1..1000); a search asking for another value sets it
            for its own transaction.
        bm25_k1, bm25_b: BM25 parameters of the impacts written at ingest (Anserini's 0.9 and 0.4).
        postings_per_term: M, postings read per query term by pruned BM25 (at least the rows asked for).
        command_timeout_s: asyncpg's default timeout of one statement, seconds (None: no limit).
        statement_cache_size: asyncpg's prepared-statement cache per connection; 0 for PgBouncer in transaction
            mode (then each statement is prepared unnamed, still one round trip).
    """

    def __init__(
        self,
        dsn: str,
        model_name: str,
        dim: int,
        max_pool_size: int = 8,
        *,
        ef_search: int = 100,
        bm25_k1: float = 0.9,
        bm25_b: float = 0.4,
        postings_per_term: int = 100,
        command_timeout_s: float | None = 60.0,
        statement_cache_size: int = 100,
    ) -> None:
        if not 1 <= dim <= MAX_HNSW_DIM:
            raise StoreError(
                f"embedding dimension {dim} of model {model_name!r}: pgvector's HNSW index on `vector` takes 1.."
                f"{MAX_HNSW_DIM} dimensions; use a model of at most {MAX_HNSW_DIM} dimensions"
            )
        if not 1 <= ef_search <= 1000 or postings_per_term < 1 or statement_cache_size < 0:
            raise StoreError(
                f"ef_search={ef_search}, postings_per_term={postings_per_term}, "
                f"statement_cache_size={statement_cache_size}; expected 1..1000, >= 1 and >= 0"
            )
        self.dsn = dsn
        self.model_name = model_name
        self.dim = dim
        self.max_pool_size = max_pool_size
        self.ef_search = int(ef_search)
        self.bm25_k1 = float(bm25_k1)
        self.bm25_b = float(bm25_b)
        self.postings_per_term = int(postings_per_term)
        self.command_timeout_s = command_timeout_s
        self.statement_cache_size = statement_cache_size
        self._pool: asyncpg.Pool | None = None
        self._vector_schema = "public"

    @property
    def server_settings(self) -> dict[str, str]:
        """Session defaults of every pooled connection (sent at connection start-up, kept across the pool's
        `RESET ALL`): the default `hnsw.ef_search`, pgvector 0.8's iterative index scan (`strict_order`: a
        filtered search keeps scanning until enough rows pass the filter; an unfiltered one is unchanged), and
        custom plans for every prepared statement."""
        return {
            "hnsw.ef_search": str(self.ef_search),
            "hnsw.iterative_scan": "strict_order",
            "plan_cache_mode": "force_custom_plan",
        }

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
            StoreError: the server is unreachable; the `vector` extension sits in a schema that is not on the
                search path (names it); or the table was built for another embedder model or dimension, also an
                existing `chunks` table without `rag_meta` (names both). Nothing is written then.
        """
        try:
            setup = await asyncpg.connect(self.dsn)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot connect to Postgres at {self.dsn}: {exc}") from exc
        try:
            async with setup.transaction():
                await setup.execute("SELECT pg_advisory_xact_lock(4242)")  # serialise concurrent schema set-up
                await setup.execute("CREATE EXTENSION IF NOT EXISTS vector")
                self._vector_schema = await _vector_schema(setup)
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
                    await _check_existing_chunks(setup, self.model_name, self.dim)
                    await setup.executemany(
                        "INSERT INTO rag_meta (key, value) VALUES ($1, $2)",
                        [("embedder_model", self.model_name), ("dim", str(self.dim))],
                    )
                    await setup.execute(_schema_sql(self.dim))
                await _migrate(setup, self.bm25_k1, self.bm25_b)
        finally:
            await setup.close()
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self.max_pool_size,
                init=functools.partial(_init_conn, schema=self._vector_schema),
                server_settings=self.server_settings,
                command_timeout=self.command_timeout_s,
                statement_cache_size=self.statement_cache_size,
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot open a connection pool to Postgres at {self.dsn}: {exc}") from exc

    async def rebuild_full_text(self) -> None:
        """Recompute the BM25 statistics and every posting's impact from the stored chunks, in one transaction
        (`tools.bm25.rebuild`): re-normalises impacts written when the corpus' average chunk length differed."""
        async with self.pool.acquire() as conn, conn.transaction():
            await _lock_writes(conn)
            await bm25.rebuild(conn, self.bm25_k1, self.bm25_b)

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
                (names the doc id and chunk index); nothing is written.
        """
        if len({d.doc_id for d in docs}) != len(docs):
            raise StoreError("duplicate doc_id within one batch; expected unique document ids")
        for doc in docs:
            for chunk in doc.chunks:
                where = f"document {doc.doc_id!r}, chunk index {chunk.chunk_index}"
                if chunk.embedding.shape != (self.dim,):
                    raise StoreError(f"{where}: expected a ({self.dim},) embedding, got shape {chunk.embedding.shape}")
                if not np.isfinite(chunk.embedding).all():
                    raise StoreError(f"{where}: the embedding has non-finite values (NaN or inf)")
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
            replaced = await conn.fetch("SELECT id FROM documents WHERE doc_id = ANY($1::text[])", list(new_docs))
            await _delete_rows(conn, [r["id"] for r in replaced])
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
            await bm25.add_chunks(conn, list(ids.values()), self.bm25_k1, self.bm25_b)
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
        ef_search: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
        exact: bool = False,
    ) -> list[ChunkHit]:
        """Nearest chunks by cosine distance through the HNSW index (or an exact scan), in one round trip unless
        `ef_search` differs from the connections' default or `exact` is set (then in a transaction with
        `SET LOCAL`).

        Args:
            query: `(dim,)` float32, L2-normalised, finite.
            top_k: rows wanted (1..1000).
            ef_search: HNSW candidate list size (pgvector `hnsw.ef_search`, at most 1000; default: the store's);
                raised to `top_k` if smaller, since it caps the rows one index scan returns.
            metadata_filter: only documents whose `metadata` contains this JSON object (`@>`), by its own
                statement. pgvector 0.8's iterative index scan (`hnsw.iterative_scan = strict_order`, a session
                default) keeps scanning the graph until `top_k` rows pass the filter (or `hnsw.max_scan_tuples`,
                20,000 by default, are visited), so the result has min(top_k, matching chunks) rows in exact
                distance order.
            exact: disable index scans (`enable_indexscan = off`): a sequential scan ranks every chunk, the
                ground truth for HNSW recall.

        Returns:
            Up to `top_k` hits, best first; `score` = cosine similarity in [-1, 1].

        Raises:
            StoreError: wrong query shape, non-finite values, or top_k outside 1..1000.
        """
        if query.shape != (self.dim,):
            raise StoreError(f"query embedding: expected shape ({self.dim},), got {query.shape}")
        if not np.isfinite(query).all():
            raise StoreError("query embedding has non-finite values (NaN or inf); expected a finite vector")
        if not 1 <= top_k <= 1000:
            raise StoreError(f"top_k={top_k}; expected 1..1000")
        ef = min(max(int(ef_search or self.ef_search), int(top_k)), 1000)
        args: tuple[Any, ...] = (query, top_k)
        sql = DENSE_SQL
        if metadata_filter is not None:
            sql, args = DENSE_FILTERED_SQL, (*args, json.dumps(metadata_filter))
        if ef == self.ef_search and not exact:
            rows = await self.pool.fetch(sql, *args)
        else:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                if exact:
                    await conn.execute("SET LOCAL enable_indexscan = off")
                rows = await conn.fetch(sql, *args)
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
        k1: float | None = None,
        b: float | None = None,
    ) -> list[ChunkHit]:
        """Chunks matching the query's `english` lexemes (stored `tsvector`), ranked; one round trip.

        Args:
            query: free text.
            top_k: rows wanted (1..1000).
            match: for `ts_rank_cd`: `all` = `websearch_to_tsquery('english', query)` (every term must occur;
                quotes and `-term` work as on a web search engine); `any` = the same lexemes as `plainto_tsquery`
                joined by OR (`|`), which suits long natural-language queries such as claims. BM25 always
                matches any lexeme.
            rank: `ts_rank_cd` (Postgres cover density over the GIN index, no corpus statistics), `bm25` (Okapi
                BM25, pruned: the top max(M, top_k) postings of each query term by stored impact, candidates
                scored exactly; see `tools.bm25`) or `bm25_exhaustive` (every posting of every query term).
            k1, b: BM25 parameters of the score (default: the store's, which the stored impacts use).

        Returns:
            Up to `top_k` hits, best first (ties by insertion order); `score` = the rank function's value.

        Raises:
            StoreError: unknown `match` or `rank`, or top_k outside 1..1000.
        """
        if not 1 <= top_k <= 1000:
            raise StoreError(f"top_k={top_k}; expected 1..1000")
        params = (float(self.bm25_k1 if k1 is None else k1), float(self.bm25_b if b is None else b))
        if rank == "bm25":
            rows = await self.pool.fetch(BM25_SQL, query, top_k, *params, max(self.postings_per_term, top_k))
            return [_hit(r) for r in rows]
        if rank == "bm25_exhaustive":
            rows = await self.pool.fetch(BM25_EXHAUSTIVE_SQL, query, top_k, *params)
            return [_hit(r) for r in rows]
        if rank != "ts_rank_cd" or match not in ("all", "any"):
            raise StoreError(
                f"full-text rank={rank!r}, match={match!r}; expected bm25|bm25_exhaustive|ts_rank_cd and all|any"
            )
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
    """Delete documents by primary key `ids` with their chunks and postings (ON DELETE CASCADE), taking them out
    of the BM25 statistics first; inside the caller's transaction, after `_lock_writes`."""
    if ids:
        await bm25.remove_chunks(conn, ids)
        await conn.execute("DELETE FROM documents WHERE id = ANY($1::bigint[])", ids)


async def _migrate(conn: Conn, k1: float, b: float) -> None:
    """Bring a store made by an earlier version up to this schema (inside `connect`'s locked transaction): the
    `ingested_at` column, the `source` index, the BM25 tables (built from the stored chunks when new)."""
    has_ingested_at = await conn.fetchval(
        "SELECT 1 FROM pg_attribute WHERE attrelid = 'documents'::regclass AND attname = 'ingested_at'"
    )
    if not has_ingested_at:
        await conn.execute("ALTER TABLE documents ADD COLUMN ingested_at timestamptz NOT NULL DEFAULT now()")
    if await conn.fetchval("SELECT to_regclass('documents_source')") is None:
        await conn.execute("CREATE INDEX documents_source ON documents (source)")
    if await conn.fetchval("SELECT to_regclass('bm25_corpus')") is None:
        await conn.execute(bm25.SCHEMA_SQL)
        await bm25.rebuild(conn, k1, b)


async def _init_conn(conn: asyncpg.Connection, schema: str) -> None:
    await register_vector(conn, schema=schema)


async def _vector_schema(conn: Conn) -> str:
    """The schema of pgvector's `vector` type. Raises StoreError, naming it, when it is not on the search path
    (the schema's unqualified `vector(dim)`, `<=>` and `vector_cosine_ops` would not resolve)."""
    row = await conn.fetchrow(
        """
        SELECT n.nspname AS schema, n.nspname = ANY (current_schemas(false)) AS visible
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE t.typname = 'vector' ORDER BY visible DESC LIMIT 1
        """
    )
    if row is None:
        raise StoreError("the `vector` extension is not installed and could not be created; install pgvector")
    if not row["visible"]:
        raise StoreError(
            f"the `vector` extension is in schema {row['schema']!r}, which is not on the search path "
            f"({await conn.fetchval('SHOW search_path')}); add it, e.g. "
            f"`ALTER DATABASE ... SET search_path = public, {row['schema']}`, or the query parameter "
            f"`search_path=public,{row['schema']}` in DATABASE_URL"
        )
    return str(row["schema"])


async def _check_existing_chunks(conn: Conn, model_name: str, dim: int) -> None:
    """A `chunks` table made without `rag_meta` (another tool, an old version) must hold `vector(dim)` embeddings;
    raises StoreError naming the column's type otherwise, before anything is written."""
    column = await conn.fetchval(
        """
        SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
        WHERE a.attrelid = to_regclass('chunks') AND a.attname = 'embedding' AND NOT a.attisdropped
        """
    )
    if column is not None and column.rsplit(".", 1)[-1] != f"vector({dim})":
        raise StoreError(
            f"the existing `chunks` table stores embeddings as {column}; the configured embedder {model_name!r} "
            f"needs vector({dim}). Use another database or re-create this one."
        )


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


DENSE_SQL = f"""
SELECT {_HIT_COLUMNS}, 1 - (c.embedding <=> $1) AS score
FROM chunks c JOIN documents d ON d.id = c.document_id
ORDER BY c.embedding <=> $1
LIMIT $2
"""
"""Dense search: $1 query vector, $2 top_k."""

DENSE_FILTERED_SQL = f"""
SELECT {_HIT_COLUMNS}, 1 - (c.embedding <=> $1) AS score
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE d.metadata @> $3::jsonb
ORDER BY c.embedding <=> $1
LIMIT $2
"""
"""Dense search with a metadata filter: $1 query vector, $2 top_k, $3 JSON object the metadata must contain."""

BM25_SQL = bm25.pruned_sql(_HIT_COLUMNS)
"""Pruned BM25: $1 query text, $2 top_k, $3 k1, $4 b, $5 postings read per term."""

BM25_EXHAUSTIVE_SQL = bm25.exhaustive_sql(_HIT_COLUMNS)
"""Exhaustive BM25: $1 query text, $2 top_k, $3 k1, $4 b."""
