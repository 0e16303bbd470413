"""Store set-up against the real Postgres in unusual databases: pgvector in another schema, a `chunks` table made
without `rag_meta` for another dimension, and a dimension HNSW cannot index. Each is refused before anything is
written, or works once the schema is on the search path."""

from __future__ import annotations

import asyncpg
import numpy as np
import pytest

from evals.retrieval_eval import ensure_database
from tools.errors import StoreError
from tools.records import ChunkRecord, DocumentRecord
from tools.store import VectorStore


async def fresh_database(postgres_url: str, name: str, *setup: str) -> str:
    """Database `name` dropped and re-created, then `setup` statements run in it; returns its URL."""
    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        await admin.close()
    url = await ensure_database(postgres_url, name)
    conn = await asyncpg.connect(url)
    try:
        for statement in setup:
            await conn.execute(statement)
    finally:
        await conn.close()
    return url


async def table_exists(url: str, table: str) -> bool:
    conn = await asyncpg.connect(url)
    try:
        return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table))
    finally:
        await conn.close()


async def test_vector_extension_in_another_schema(postgres_url: str) -> None:
    url = await fresh_database(
        postgres_url, "test_schema_ext", "CREATE SCHEMA extensions", "CREATE EXTENSION vector WITH SCHEMA extensions"
    )
    with pytest.raises(StoreError, match=r"schema 'extensions', which is not on the search path"):
        await VectorStore(url, "m", 4).connect()
    assert not await table_exists(url, "rag_meta")
    on_path = url + "&search_path=public%2Cextensions" if "?" in url else url + "?search_path=public%2Cextensions"
    async with VectorStore(on_path, "m", 4) as store:
        vector = np.array([1, 0, 0, 0], dtype=np.float32)
        await store.add_documents([DocumentRecord("d", "t", "s", "h", [ChunkRecord(0, "some words", 2, vector)])])
        hits = await store.dense_search(vector, 1)
        assert (hits[0].doc_id, round(hits[0].score, 6)) == ("d", 1.0)


async def test_existing_chunks_table_of_another_dimension_is_refused(postgres_url: str) -> None:
    url = await fresh_database(
        postgres_url,
        "test_schema_dim",
        "CREATE EXTENSION vector",
        "CREATE TABLE chunks (id bigserial PRIMARY KEY, embedding vector(768))",
    )
    with pytest.raises(StoreError, match=r"embeddings as vector\(768\).*'all-minilm-l6-v2' needs vector\(384\)"):
        await VectorStore(url, "all-minilm-l6-v2", 384).connect()
    assert not await table_exists(url, "rag_meta")
    assert not await table_exists(url, "documents")


def test_dimension_beyond_hnsw_is_refused_before_connecting() -> None:
    with pytest.raises(StoreError, match=r"dimension 4096 of model 'big'.*1\.\.2000"):
        VectorStore("postgresql://nowhere/db", "big", 4096)
