"""Chunks, vectors and full text in PostgreSQL + pgvector, through asyncpg pools: the adapter behind the ports.

One module per job: `records` (asyncpg's connection type, search rows as hits), `errors` (asyncpg's exceptions as
the store's errors, `tools.errors`), `schema` (tables, created and migrated at connect), `pools` (read and write
pools, bounded acquire, one transaction per operation), `writes` (ingest, replace, delete under the write lock),
`search` (dense, full text, cosine look-ups with per-transaction search settings), `listing` (counts and document
pages), and `vector_store` (the `VectorStore` object that puts them together). What goes in and comes out (documents,
chunks, hits, counts, listings) is the shared vocabulary, `tools.records`; the errors are `tools.errors`.

The service's other tables go through the same pools, transactions and error translation: `conversations` (the
conversation log), `jobs` (ingestion and sync jobs and their files), `staging` (the staged chunks of large
documents), `sync_state` (what folder syncs recorded, written with the documents) and `keys` (API keys); import those
from their modules.
"""

from tools.store.schema import MAX_HNSW_DIM
from tools.store.search import BM25_EXHAUSTIVE_SQL, BM25_SQL, DENSE_FILTERED_SQL, DENSE_SQL
from tools.store.vector_store import VectorStore

__all__ = [
    "BM25_EXHAUSTIVE_SQL",
    "BM25_SQL",
    "DENSE_FILTERED_SQL",
    "DENSE_SQL",
    "MAX_HNSW_DIM",
    "VectorStore",
]
