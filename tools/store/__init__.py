"""Chunks, vectors and full text in PostgreSQL + pgvector, through asyncpg pools.

One module per job: `records` (what goes in and comes out), `errors` (the store's errors and the translation of
asyncpg's), `schema` (tables, created and migrated at connect), `pools` (read and write pools, bounded acquire, one
transaction per operation), `writes` (ingest, replace, delete under the write lock), `search` (dense, full text,
cosine look-ups with per-transaction search settings), `listing` (counts and document pages), and `vector_store`
(the `VectorStore` object that puts them together). Everything callers use is importable from `tools.store`.

The service's other tables go through the same pools, transactions and error translation: `conversations` (the
conversation log), `jobs` (ingestion and sync jobs and their files), `staging` (the staged chunks of large
documents), `sync_state` (what folder syncs recorded, written with the documents) and `keys` (API keys); import those
from their modules.
"""

from tools.store.errors import StoreBusyError, StoreError, StoreQueryError, StoreUnavailableError
from tools.store.records import (
    ChunkHit,
    ChunkRecord,
    Conn,
    DocumentPage,
    DocumentRecord,
    FullTextMatch,
    FullTextRank,
    IngestCounts,
    StoredChunk,
    StoredDocument,
    TermVectors,
)
from tools.store.schema import MAX_HNSW_DIM
from tools.store.search import BM25_EXHAUSTIVE_SQL, BM25_SQL, DENSE_FILTERED_SQL, DENSE_SQL
from tools.store.vector_store import VectorStore

__all__ = [
    "BM25_EXHAUSTIVE_SQL",
    "BM25_SQL",
    "DENSE_FILTERED_SQL",
    "DENSE_SQL",
    "MAX_HNSW_DIM",
    "ChunkHit",
    "ChunkRecord",
    "Conn",
    "DocumentPage",
    "DocumentRecord",
    "FullTextMatch",
    "FullTextRank",
    "IngestCounts",
    "StoreBusyError",
    "StoreError",
    "StoreQueryError",
    "StoreUnavailableError",
    "StoredChunk",
    "StoredDocument",
    "TermVectors",
    "VectorStore",
]
