"""`VectorStore`: the store's public object, one method per operation; each is one transaction on a connection of
the right pool (`tools.store.pools`) or read replica (`tools.store.replicas`), and raises only the store's errors
(`tools.store.errors`). Over 400 lines because of the public methods' docstrings (shapes, units, errors); the work
is done in the modules it calls."""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import asyncpg
import numpy as np
import numpy.typing as npt

from tools.access import UNRESTRICTED, Access, AccessError, document_groups
from tools.errors import StoreError
from tools.records import (
    MAX_PAGE,
    ChunkHit,
    DocumentFilter,
    DocumentPage,
    DocumentRecord,
    FullTextMatch,
    FullTextOptions,
    Hashes,
    IngestCounts,
    StagedDocument,
    StagedRow,
    StoredChunk,
    StoredDocument,
    TermVectors,
    check_batch,
    decode_cursor,
    split_groups,
)
from tools.scope import DEFAULT_COLLECTION, SearchScope, check_collection
from tools.store import listing, pools, replicas, schema, search, staging, writes
from tools.store.errors import translated
from tools.store.records import Conn

T = TypeVar("T")

READ = "BEGIN READ ONLY"
SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


class VectorStore:
    """Chunks, vectors and full text in PostgreSQL + pgvector for one embedder, through asyncpg pools.

    Args:
        dsn: `postgresql://` URL of a server with the `vector` extension available (directly or through PgBouncer
            in transaction mode).
        model_name: embedder model name recorded with the table.
        dim: embedding width, e.g. 384.
        max_pool_size: most connections of the read pool (searches, listings, counts, document reads).
        write_pool_size: most connections of the write pool (ingest, replace, delete). Writers are serialised by
            a lock, so more than 2 only queue on it; a writer beyond them waits for a connection (bounded).
        acquire_timeout_s: longest wait for a pooled connection, seconds (`DB_ACQUIRE_TIMEOUT_S`); then
            `StoreBusyError`.
        ef_search: default `hnsw.ef_search` of a search (1..1000).
        bm25_k1, bm25_b: BM25 parameters of the impacts written at ingest (Anserini's 0.9 and 0.4).
        postings_per_term: M, postings read per query term by pruned BM25 (at least the rows asked for).
        command_timeout_s: asyncpg's default timeout of one statement, seconds (None: no limit).
        statement_cache_size: asyncpg's prepared-statement cache per connection; 0 for PgBouncer in transaction
            mode (then statements are prepared unnamed inside the operation's transaction).
        read_urls: streaming read replicas (`DATABASE_READ_URLS`) for searches and document reads; writes,
            listings and counts use `dsn` (see `tools.store.replicas`).
        read_max_lag_s: most replay lag of a replica that serves searches, and the longest a write waits for the
            replicas to replay it, seconds (`DATABASE_READ_MAX_LAG_S`).

    Raises (every method): `StoreUnavailableError` (Postgres down, restarting or shutting down; retryable),
    `StoreBusyError` (no pooled connection within `acquire_timeout_s`; retryable), `StoreQueryError` (a statement
    failed), or `StoreError` for bad input as documented per method.
    """

    def __init__(
        self,
        dsn: str,
        model_name: str,
        dim: int,
        max_pool_size: int = 8,
        *,
        write_pool_size: int = 2,
        acquire_timeout_s: float = 5.0,
        ef_search: int = 100,
        bm25_k1: float = 0.9,
        bm25_b: float = 0.4,
        postings_per_term: int = 100,
        command_timeout_s: float | None = 60.0,
        statement_cache_size: int = 100,
        read_urls: Sequence[str] = (),
        read_max_lag_s: float = 5.0,
    ) -> None:
        if not 1 <= dim <= schema.MAX_HNSW_DIM:
            raise StoreError(
                f"embedding dimension {dim} of model {model_name!r}: pgvector's HNSW index on `vector` takes 1.."
                f"{schema.MAX_HNSW_DIM} dimensions; use a model of at most {schema.MAX_HNSW_DIM} dimensions"
            )
        if not 1 <= ef_search <= 1000 or postings_per_term < 1 or statement_cache_size < 0:
            raise StoreError(
                f"ef_search={ef_search}, postings_per_term={postings_per_term}, "
                f"statement_cache_size={statement_cache_size}; expected 1..1000, >= 1 and >= 0"
            )
        if max_pool_size < 1 or write_pool_size < 1 or not acquire_timeout_s > 0:
            raise StoreError(
                f"max_pool_size={max_pool_size}, write_pool_size={write_pool_size}, "
                f"acquire_timeout_s={acquire_timeout_s}; expected >= 1, >= 1 and > 0"
            )
        self.dsn = dsn
        self.model_name = model_name
        self.dim = dim
        self.max_pool_size = max_pool_size
        self.write_pool_size = write_pool_size
        self.acquire_timeout_s = float(acquire_timeout_s)
        self.ef_search = int(ef_search)
        self.bm25_k1 = float(bm25_k1)
        self.bm25_b = float(bm25_b)
        self.postings_per_term = int(postings_per_term)
        self.command_timeout_s = command_timeout_s
        self.statement_cache_size = statement_cache_size
        self.read_urls = tuple(read_urls)
        self.read_max_lag_s = float(read_max_lag_s)
        self.search_targets: Counter[str] = Counter()
        """Searches served per target: "primary" or a replica's URL."""
        self._read: asyncpg.Pool | None = None
        self._write: asyncpg.Pool | None = None
        self._replicas: replicas.ReplicaSet | None = None

    async def __aenter__(self) -> VectorStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pool(self) -> asyncpg.Pool:
        """The open read pool (on the primary). Raises StoreError when not connected."""
        if self._read is None:
            raise StoreError("VectorStore is not connected; use `async with` or call connect()")
        return self._read

    @property
    def write_pool(self) -> asyncpg.Pool:
        """The open write pool. Raises StoreError when not connected."""
        if self._write is None:
            raise StoreError("VectorStore is not connected; use `async with` or call connect()")
        return self._write

    def search_settings(self, ef_search: int | None = None, exact: bool = False) -> str:
        """The `SET LOCAL` statements a search transaction starts with (`tools.store.search.settings_sql`)."""
        return search.settings_sql(ef_search or self.ef_search, exact)

    async def connect(self) -> None:
        """Create the extension and schema if missing, check the stored embedder, open the pools.

        Raises:
            StoreUnavailableError: the server is unreachable (names the URL).
            StoreError: the `vector` extension sits in a schema that is not on the search path (names it); or the
                table was built for another embedder model or dimension, also an existing `chunks` table without
                `rag_meta` (names both). Nothing is written then.
        """
        action = f"connecting to Postgres at {self.dsn}"
        with translated(action):
            setup = await asyncpg.connect(self.dsn, statement_cache_size=self.statement_cache_size)
        try:
            with translated(f"setting up the store's schema at {self.dsn}"):
                vector_schema = await schema.set_up(setup, self.model_name, self.dim, self.bm25_k1, self.bm25_b)
        finally:
            with translated(action):
                await setup.close()
        options: dict[str, Any] = {
            "vector_schema": vector_schema,
            "command_timeout_s": self.command_timeout_s,
            "statement_cache_size": self.statement_cache_size,
        }
        self._read = await pools.open_pool(
            self.dsn, min_size=1, max_size=self.max_pool_size, action=f"opening the read pool to {self.dsn}", **options
        )
        try:
            if self.read_urls:
                self._replicas = await replicas.open_replicas(
                    self.read_urls,
                    primary=self._read,
                    max_size=self.max_pool_size,
                    max_lag_s=self.read_max_lag_s,
                    acquire_timeout_s=self.acquire_timeout_s,
                    **options,
                )
            self._write = await pools.open_pool(
                self.dsn,
                min_size=0,
                max_size=self.write_pool_size,
                action=f"opening the write pool to {self.dsn}",
                **options,
            )
        except StoreError:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the pools (idempotent)."""
        for name in ("_read", "_write"):
            pool = getattr(self, name)
            setattr(self, name, None)
            if pool is not None:
                await pool.close()
        if self._replicas is not None:
            replica_set, self._replicas = self._replicas, None
            await replica_set.close()

    async def rebuild_full_text(self) -> None:
        """Recompute the BM25 statistics and every posting's impact from the stored chunks, in one transaction
        (`tools.bm25.rebuild`): re-normalises impacts written when the corpus' average chunk length differed."""
        async with pools.transaction(self.write_pool, self.acquire_timeout_s, "rebuilding BM25") as conn:
            await writes.rebuild_full_text(conn, self.bm25_k1, self.bm25_b)
        await self._replicated()

    async def stored_versions(self, doc_ids: list[str], collection: str = DEFAULT_COLLECTION) -> dict[str, str]:
        """doc_id -> stored content hash, for those of `doc_ids` that are stored in `collection` (a hint for
        skipping work before the write: `add_documents` decides again under the write lock)."""
        _collection(collection)
        async with pools.transaction(self.pool, self.acquire_timeout_s, "reading stored versions", READ) as conn:
            return await listing.stored_versions(conn, doc_ids, collection)

    async def chunk_vectors(
        self, doc_ids: list[str], collection: str = DEFAULT_COLLECTION
    ) -> dict[str, dict[str, npt.NDArray[np.float32]]]:
        """doc_id -> {sha256 hex of a chunk's text: its stored embedding `(dim,)` float32} for those of `doc_ids`
        stored in `collection`: the vectors a new version of a document reuses for the chunks whose text did not
        change (`tools.ingest.reuse`)."""
        _collection(collection)
        async with pools.transaction(self.pool, self.acquire_timeout_s, "reading stored chunk vectors", READ) as conn:
            return await listing.chunk_vectors(conn, doc_ids, collection)

    async def add_documents(
        self, docs: Sequence[DocumentRecord], unchanged: Hashes | None = None, *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Store `docs` and their chunks in `collection`, in one transaction, under the write lock; a document
        stored in that collection with the same content hash is skipped, one stored there with another hash is
        replaced (old chunks deleted). The same doc id in another collection is another document, never touched.

        Args:
            docs: documents with their chunks.
            unchanged: doc_id -> content hash of documents the caller found stored unchanged and sends without
                chunks. Each counts as skipped if it is still stored with that hash when the transaction looks
                (under the lock); otherwise its doc id is in `IngestCounts.missing` for the caller to store.
            collection: the documents' collection (`tools.scope.check_collection`).

        The groups allowed to read each document are its metadata's `groups` (`tools.records.split_groups`: a
        list or one comma-separated string; absent: `tools.access.PUBLIC_GROUP`), stored in its `groups` column and
        its chunks', not in its metadata.

        Raises:
            StoreError: duplicate doc ids, an invalid collection name, or an embedding with the wrong shape or
                non-finite values (names the doc id and chunk index); nothing is written.
            AccessError: a document's `groups` is not valid (names the document and the group); nothing is written.
        """
        _collection(collection)
        unchanged = dict(unchanged or {})
        check_batch(docs, unchanged, self.dim)
        for doc in docs:
            split_groups(doc.doc_id, doc.metadata)
        if not docs and not unchanged:
            return IngestCounts()
        async with pools.transaction(self.write_pool, self.acquire_timeout_s, "storing documents") as conn:
            counts = await writes.add_documents(conn, docs, unchanged, self.bm25_k1, self.bm25_b, collection)
        if counts.added:
            await self._replicated()
        return counts

    async def resume_point(self, doc: StagedDocument, collection: str = DEFAULT_COLLECTION) -> int:
        """Chunks of large document `doc` an earlier run left staged in `collection` (indexes 0..n-1: returns n);
        staged chunks of another content hash are dropped (`tools.store.staging.resume_point`).

        Raises:
            StoreUnavailableError / StoreBusyError / StoreQueryError: Postgres failed.
        """
        return await staging.resume_point(self, doc, collection)

    async def stage_chunks(self, rows: Sequence[StagedRow]) -> None:
        """Stage one sub-batch of a large document's embedded chunks in one transaction
        (`tools.store.staging.stage_chunks`).

        Raises:
            StoreUnavailableError / StoreBusyError / StoreQueryError: Postgres failed; nothing of `rows` is staged.
        """
        await staging.stage_chunks(self, rows)

    async def commit_staged(self, doc: StagedDocument, collection: str = DEFAULT_COLLECTION) -> int:
        """Store the staged chunks of `doc` in `collection` in one transaction, replacing a stored version; returns
        the chunks stored (`tools.store.staging.commit_staged`).

        Raises:
            StoreUnavailableError / StoreBusyError / StoreQueryError: Postgres failed; the staged chunks stay.
        """
        stored = await staging.commit_staged(self, doc, collection)
        await self._replicated()
        return stored

    async def delete_documents(
        self, doc_ids: Sequence[str] = (), source: str | None = None, *, collections: Sequence[str] | None = None
    ) -> list[str]:
        """Delete the documents named in `doc_ids` and (when given) every document whose `source` equals `source`,
        in `collections` only (None: every collection), with their chunks and full-text postings, in one
        transaction.

        Returns:
            The doc ids actually deleted, sorted (names that were not stored in those collections are left out;
            a doc id deleted from two collections is listed twice).

        Raises:
            StoreError: `doc_ids` is a single string (expected a sequence of ids); a failed transaction (then
                nothing was deleted) raises the store's Postgres errors.
        """
        if isinstance(doc_ids, str):
            raise StoreError(f"doc_ids={doc_ids!r}; expected a sequence of document ids, not one string")
        ids = list(doc_ids)
        if (not ids and source is None) or (collections is not None and not collections):
            return []
        action = "deleting documents (nothing was deleted)"
        async with pools.transaction(self.write_pool, self.acquire_timeout_s, action) as conn:
            deleted = await writes.delete_documents(conn, ids, source, _collections(collections))
        if deleted:
            await self._replicated()
        return deleted

    async def list_documents(
        self,
        limit: int | None = None,
        offset: int = 0,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> list[StoredDocument]:
        """Stored documents of `collections` (None: all) ordered by (`doc_id`, collection), `limit` of them (all
        when None) after skipping `offset`. For large stores use `document_page` or `iter_documents` (keyset pages,
        no offset scan). Only the documents `access` may read (`tools.access`) are listed.

        Raises:
            StoreError: negative `limit` or `offset`.
        """
        if (limit is not None and limit < 0) or offset < 0:
            raise StoreError(f"limit={limit}, offset={offset}; expected non-negative numbers")
        async with self._reading("listing documents", READ, access) as conn:
            return await listing.offset_page(conn, limit, offset, _collections(collections))

    async def document_page(
        self, limit: int = 100, cursor: str | None = None, offset: int = 0, **where: Unpack[DocumentFilter]
    ) -> DocumentPage:
        """One keyset page of the stored documents of `where["collections"]` (absent or None: all) in (doc_id,
        collection) order, with the total stored in those collections (one snapshot).

        Args:
            limit: documents per page, 1..10,000.
            cursor: None for the first page, else the previous page's `next_cursor`.
            offset: documents to skip after the cursor first (reads them; prefer the cursor).
            where: `DocumentFilter`: `collections`, the collections listed and counted (documents of others never
                appear); `matching`, only documents whose doc id or title contains this text, case-insensitively
                (`ILIKE`, no index: reads every document row of the collections), the total counts those (None or
                empty: all); `access`, whose listing this is: only the documents it may read are listed and counted
                (absent: every document).

        Raises:
            StoreError: `limit` or `offset` out of range, or a cursor this store did not issue.
        """
        if not 1 <= limit <= MAX_PAGE or offset < 0:
            raise StoreError(f"limit={limit}, offset={offset}; expected 1..{MAX_PAGE} and >= 0")
        if cursor is not None:
            decode_cursor(cursor)
        access = where.get("access", UNRESTRICTED)
        async with self._reading("listing documents", SNAPSHOT, access) as conn:
            collections = _collections(where.get("collections"))
            return await listing.keyset_page(conn, limit, cursor, offset, collections, where.get("matching"))

    async def iter_documents(
        self, page_size: int = 1000, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> AsyncIterator[StoredDocument]:
        """Every stored document of `collections` (None: all) in (doc_id, collection) order, read `page_size` at a
        time (one short transaction per page, so memory stays bounded and no connection is held between pages; a
        document added or deleted meanwhile may or may not appear)."""
        cursor: str | None = None
        while True:
            page = await self.document_page(page_size, cursor, collections=collections, access=access)
            for document in page.documents:
                yield document
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def count(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> tuple[int, int]:
        """(documents, chunks) stored in `collections` (None: all) that `access` may read."""
        async with self._reading("counting documents", READ, access) as conn:
            return await listing.count(conn, _collections(collections))

    async def collection_counts(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> dict[str, int]:
        """Collection name -> documents stored in it that `access` may read, by name: every collection holding
        such a document (None), else exactly `collections` (0 for one holding none)."""
        async with self._reading("counting collections", READ, access) as conn:
            return await listing.collection_counts(conn, _collections(collections))

    async def ping(self) -> None:
        """Check that the store answers a read: the read pool's server and the `chunks` table (one row read at most,
        so its cost does not grow with the store, and it tells nothing of what the store holds).

        Raises:
            StoreUnavailableError: the server is unreachable; StoreError: the schema is missing.
        """
        async with pools.transaction(self.pool, self.acquire_timeout_s, "checking the store", READ) as conn:
            await conn.fetchval("SELECT 1 FROM chunks LIMIT 1")

    async def find_documents(
        self, doc_id: str, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> list[StoredDocument]:
        """The stored documents named `doc_id` in `collections` (None: all) that `access` may read, one per
        collection holding it, by collection name; empty when none of them holds it (a document `access` may not
        read looks missing)."""
        async with self._reading("reading a document", READ, access) as conn:
            return await listing.find(conn, doc_id, _collections(collections))

    async def chunk_metadata(
        self,
        doc_id: str,
        chunk_id: str,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> StoredChunk | None:
        """(collection, metadata, text) of chunk `chunk_id` of document `doc_id` in `collections` (None: all); None when
        no such chunk is stored there or `access` may not read it."""
        async with self._reading("reading a chunk", READ, access) as conn:
            return await listing.chunk_metadata(conn, doc_id, chunk_id, _collections(collections))

    async def dense_search(
        self,
        query: npt.NDArray[np.float32],
        top_k: int,
        ef_search: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
        exact: bool = False,
        scope: SearchScope | None = None,
    ) -> list[ChunkHit]:
        """Nearest chunks by cosine distance through the HNSW index (or an exact scan).

        Args:
            query: `(dim,)` float32, L2-normalised, finite.
            top_k: rows wanted (1..1000).
            ef_search: HNSW candidate list size (pgvector `hnsw.ef_search`, at most 1000; default: the store's);
                raised to `top_k` if smaller, since it caps the rows one index scan returns.
            metadata_filter: only documents whose `metadata` contains this JSON object (`@>`), by its own
                statement. pgvector 0.8's iterative index scan (`hnsw.iterative_scan = strict_order`) keeps
                scanning the graph until `top_k` rows pass the filter (or `hnsw.max_scan_tuples`, 20,000 by
                default, are visited), so the result has min(top_k, matching chunks) rows in exact distance order.
            exact: disable index scans (`enable_indexscan = off`): a sequential scan ranks every chunk, the
                ground truth for HNSW recall.
            scope: only chunks of documents in this scope (collections, metadata, source, ingest time;
                `tools.scope`); None: every document. A filter (scope or `metadata_filter`) never under-fills:
                below `search.EXACT_BELOW_CHUNKS` matching chunks (a capped count) they are ranked exactly (index
                scans off); above, by the iterative HNSW scan, then exactly if that returned fewer than `top_k`.

        Returns:
            min(top_k, chunks passing the filter) hits, best first; `score` = cosine similarity in [-1, 1].

        Raises:
            StoreError: wrong query shape, non-finite values, or top_k outside 1..1000.
        """
        search.check_query(query, self.dim)
        search.check_top_k(top_k)
        ef = min(max(int(ef_search or self.ef_search), int(top_k)), 1000)
        return await self._read_only(
            "dense search",
            self.search_settings(ef, exact),
            lambda c: search.dense(c, query, top_k, metadata_filter, scope, exact),
            _access(scope),
        )

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
        search.check_query(query, self.dim)
        if not chunk_ids:
            return {}
        return await self._read_only(
            "cosine similarities", self.search_settings(), lambda c: search.cosine_similarities(c, query, chunk_ids)
        )

    async def full_text_search(
        self, query: str, top_k: int, match: FullTextMatch = "all", **options: Unpack[FullTextOptions]
    ) -> list[ChunkHit]:
        """Chunks matching the query's `english` lexemes (stored `tsvector`), ranked.

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
            options: `FullTextOptions`: `rank` (default `ts_rank_cd`), `k1`, `b` and `scope`, as follows.
            k1, b: BM25 parameters of the score (default: the store's, which the stored impacts use).
            scope: only chunks of documents in this scope (`tools.scope`); None: every document. Each rank applies
                it in its own statement; pruned BM25 reads each term's top M postings among the chunks in scope,
                or scores every posting of them (exhaustive) when fewer than
                `search.BM25_EXHAUSTIVE_BELOW_CHUNKS` chunks are in scope. BM25's corpus statistics (N, df,
                avgdl) stay the whole store's.

        Returns:
            Up to `top_k` hits, best first (ties by insertion order); `score` = the rank function's value.

        Raises:
            StoreError: unknown `match` or `rank`, or top_k outside 1..1000.
        """
        rank, scope = options.get("rank", "ts_rank_cd"), options.get("scope")
        search.check_top_k(top_k)
        search.check_full_text(match, rank)
        k1, b = self._bm25(options)
        return await self._read_only(
            "full-text search",
            self.search_settings(),
            lambda c: search.full_text(c, query, top_k, match, rank, k1, b, self.postings_per_term, scope),
            _access(scope),
        )

    def _bm25(self, options: FullTextOptions) -> tuple[float, float]:
        """(k1, b) of a full-text search: `options`' where given (not None), else the store's."""
        k1, b = options.get("k1"), options.get("b")
        return float(self.bm25_k1 if k1 is None else k1), float(self.bm25_b if b is None else b)

    async def weighted_full_text_search(
        self, terms: Mapping[str, float], top_k: int, **options: Unpack[FullTextOptions]
    ) -> list[ChunkHit]:
        """BM25 for a weighted query of stored lexemes: score(chunk) = sum over t in `terms` of terms[t] * idf(t) *
        tf-part(t, chunk), e.g. a pseudo-relevance-feedback query (`tools.rm3.rm3_terms`).

        Args:
            terms: {`english` lexeme as stored (not re-analysed): weight > 0}; lexemes absent from the corpus
                contribute nothing.
            top_k, options: as `full_text_search` (`rank` `bm25`, the default, or `bm25_exhaustive`).

        Returns:
            Up to `top_k` hits, best first; `score` = the weighted BM25 score.

        Raises:
            StoreError: no terms, a weight that is not a finite number > 0, rank `ts_rank_cd`, or top_k outside
                1..1000.
        """
        rank, scope = options.get("rank", "bm25"), options.get("scope")
        search.check_top_k(top_k)
        search.check_full_text("any", rank)
        if not terms or not all(math.isfinite(w) and w > 0 for w in terms.values()):
            raise StoreError(f"weighted full-text terms {dict(terms)!r}: expected at least one, weights finite > 0")
        k1, b = self._bm25(options)
        return await self._read_only(
            "weighted full-text search",
            self.search_settings(),
            lambda c: search.full_text(c, "", top_k, "any", rank, k1, b, self.postings_per_term, scope, terms),
            _access(scope),
        )

    async def query_lexemes(self, query: str) -> list[str]:
        """The distinct `english` lexemes of `query`, sorted, as `full_text_search` analyses it (stop words
        dropped, Snowball-stemmed).

        Raises:
            StoreError: the store failed.
        """
        return await self._read_only("query lexemes", "", lambda c: search.query_lexemes(c, query))

    async def term_vectors(self, chunk_ids: Sequence[str]) -> TermVectors:
        """The stored BM25 term statistics of `chunk_ids` (lexeme counts per chunk, their document frequencies and
        the corpus size N; `TermVectors`); unknown ids are left out.

        Raises:
            StoreError: the store failed.
        """
        if not chunk_ids:
            return TermVectors(0, {}, {})
        return await self._read_only("term vectors", "", lambda c: search.term_vectors(c, chunk_ids))

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """(title, full text) of document `doc_id`, its chunks joined in order without overlap markers; None when
        it is not stored or lies outside `scope` (None: any document), so an out-of-scope document reads exactly
        like a missing one (also one the scope's `access` may not read)."""
        return await self._read_only(
            "reading a document", "", lambda c: search.get_document(c, doc_id, scope), _access(scope)
        )

    def search_session(
        self, ef_search: int | None = None, exact: bool = False
    ) -> contextlib.AbstractAsyncContextManager[Conn]:
        """The transaction every search runs in (read-only, with `search_settings`), for statements of one's own,
        e.g. EXPLAIN of the search SQL: `async with store.search_session() as conn: ...`."""
        return self._search("search session", self.search_settings(ef_search, exact))

    def _search(self, action: str, settings: str) -> contextlib.AbstractAsyncContextManager[Conn]:
        """A read-only transaction on the primary's read pool starting with `settings` (`SET LOCAL`s)."""
        return pools.transaction(self.pool, self.acquire_timeout_s, action, f"{READ}; {settings}" if settings else READ)

    async def _read_only(
        self, action: str, settings: str, fn: Callable[[Conn], Awaitable[T]], access: Access = UNRESTRICTED
    ) -> T:
        """`fn` in a read-only transaction on a usable replica, else on the primary (`replicas.read_only`), under
        `access` (its `set_local_sql` after `settings`)."""
        read = replicas.read_only(self.pool, self._replicas, self.acquire_timeout_s, self.search_targets)
        return await read(action, "; ".join(s for s in (settings, access.set_local_sql()) if s), fn)

    def _reading(self, action: str, begin: str, access: Access) -> contextlib.AbstractAsyncContextManager[Conn]:
        """A transaction on the primary's read pool starting with `begin` and, for a restricted `access`, its
        `set_local_sql` (one round trip): Postgres' row-level security then hides what `access` may not read."""
        restricted = access.set_local_sql()
        return pools.transaction(
            self.pool, self.acquire_timeout_s, action, f"{begin}; {restricted}" if restricted else begin
        )

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION
    ) -> bool:
        """Set the groups allowed to read document `doc_id` of `collection` (`tools.access.document_groups`:
        none given is `PUBLIC_GROUP`), on its row and its chunks, in one write transaction; the collection's
        version moves, so no answer cached from the old groups is served again.

        Returns:
            False when no such document is stored (nothing changed).

        Raises:
            AccessError: a group name is not valid (names it); StoreError: an invalid collection name.
        """
        _collection(collection)
        if isinstance(groups, str):
            raise AccessError(f"groups {groups!r}: expected a list of group names, got one string")
        stored = document_groups(groups)
        async with pools.transaction(self.write_pool, self.acquire_timeout_s, "setting a document's groups") as conn:
            changed = await writes.set_groups(conn, doc_id, collection, list(stored))
        if changed:
            await self._replicated()
        return changed

    async def _replicated(self) -> None:
        """After a write: wait (bounded) until the read replicas have replayed it (`replicas.replicated`)."""
        if self._replicas is not None:
            await replicas.replicated(self.pool, self._replicas, self.acquire_timeout_s)


def _access(scope: SearchScope | None) -> Access:
    """The access a read of `scope` runs under (None: `UNRESTRICTED`)."""
    return UNRESTRICTED if scope is None else scope.access


def _collection(name: str) -> None:
    """Raise StoreError (naming it) for an invalid collection name."""
    try:
        check_collection(name)
    except ValueError as exc:
        raise StoreError(str(exc)) from None


def _collections(names: Sequence[str] | None) -> list[str] | None:
    """`names` checked (`_collection`) as a list, or None (every collection)."""
    if names is None:
        return None
    if isinstance(names, str):
        raise StoreError(f"collections={names!r}; expected a sequence of collection names, not one string")
    for name in names:
        _collection(name)
    return list(names)
