"""Helpers of the store's tests: documents with random unit vectors, and a Postgres of a test module's own (in its
own data dir, stopped by PID at the end) for tests that stop and restart it."""

from __future__ import annotations

import tempfile
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import asyncpg
import numpy as np

from agent.config.settings import Settings
from infra import postgres
from infra.config import StackConfig
from tools.records import ChunkRecord, DocumentRecord
from tools.store import VectorStore

DIM = 384
MODEL = "all-minilm-l6-v2"


def unit_vector(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def record(doc_id: str, texts: list[str], version: str = "1", source: str = "test") -> DocumentRecord:
    """A document whose chunk i has text `texts[i]` and a random unit vector seeded by doc id and i."""
    seed = zlib.crc32(doc_id.encode())
    chunks = [ChunkRecord(i, t, len(t.split()), unit_vector(seed + i)) for i, t in enumerate(texts)]
    return DocumentRecord(doc_id, f"title {doc_id}", source, f"{doc_id}-{version}", chunks)


async def without_statistics(store: VectorStore) -> None:
    """Keep autovacuum's ANALYZE off the store's `documents` and `chunks` tables, so their plans stay the planner's
    plans without statistics (a fresh ingest's) for the whole test session. Call before loading the store.

    Tests of the HNSW scan on a few thousand rows need this: once analysed, such a small table is cheaper to rank
    by a sequential scan and sort (measured on 2,000 random 384-d vectors at `ef_search` 100: the analysed table is
    ranked by a sequential scan, the unanalysed one by the HNSW scan), and autovacuum analyses it after a delay that
    depends on the machine's load, which made these tests' plans depend on the order and speed of the suite."""
    async with store.write_pool.acquire() as conn:
        await conn.execute(
            "ALTER TABLE documents SET (autovacuum_enabled = off); ALTER TABLE chunks SET (autovacuum_enabled = off)"
        )


@contextmanager
def own_postgres(settings: Settings, server_root: Path, name: str) -> Iterator[Settings]:
    """An embedded Postgres in a data dir of its own under `server_root` (the conftest fixture: outside pytest's
    temp root, which any pytest session started meanwhile closes to mode 700); the settings that point at it.
    Stopped by PID at the end."""
    own = settings.model_copy(update={"data_dir": Path(tempfile.mkdtemp(prefix=f"{name}-", dir=server_root))})
    try:
        postgres.start(StackConfig.of(own))
        yield own
    finally:
        postgres.stop(StackConfig.of(own))


@asynccontextmanager
async def scratch_databases(postgres_url: str, prefix: str, count: int = 1) -> AsyncIterator[list[str]]:
    """`count` new, empty databases (`<prefix>_<12 hex>`) on the Postgres server of `postgres_url`, dropped on exit
    (`WITH (FORCE)`: also when a server under test still holds connections); their URLs, in creation order."""
    names = [f"{prefix}_{uuid4().hex[:12]}" for _ in range(count)]
    conn = await asyncpg.connect(postgres_url)
    try:
        for name in names:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield [urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}")) for name in names]
    finally:
        conn = await asyncpg.connect(postgres_url)
        try:
            for name in names:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
