"""Every store operation through a real PgBouncer (Debian's 1.18) in transaction mode in front of the test Postgres:
ingest, searches (each mode), listing and delete give the same results, and searches run with the same settings and
plans, as through a direct connection; `rag docs list` works through it without a statement cache."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agent.cli.main import LIST_PAGE
from agent.config.settings import Settings
from evals.retrieval_eval import ensure_database
from tests.conftest import cli_env
from tests.pgbouncer import pgbouncer
from tests.store_helpers import DIM, MODEL, record, unit_vector, without_statistics
from tools.access import NOBODY, caller_access
from tools.records import ChunkRecord, DocumentRecord
from tools.scope import SearchScope
from tools.store import DENSE_FILTERED_SQL, DENSE_SQL, VectorStore

DATABASE = "test_store_pgbouncer"
SEARCH_SETTINGS = ("hnsw.ef_search", "hnsw.iterative_scan", "plan_cache_mode", "enable_indexscan")
TEXTS = [
    "zebras have black and white stripes",
    "the okapi is a relative of the giraffe",
    "giraffes have long necks and eat acacia leaves",
    "lions hunt zebras on the savanna",
    "an aardvark digs burrows for termites",
]


@pytest.fixture(scope="module")
def bouncer(postgres_url: str) -> Iterator[str]:
    with pgbouncer(postgres_url, pool_size=3) as template:
        yield template


@pytest.fixture
async def stores(postgres_url: str, bouncer: str) -> AsyncIterator[tuple[VectorStore, VectorStore]]:
    """(direct, through PgBouncer with no statement cache) stores over one database, emptied first; never analysed
    (`without_statistics`), so the planner's choice of the HNSW scan does not depend on when autovacuum runs."""
    direct_url = await ensure_database(postgres_url, DATABASE)
    async with (
        VectorStore(direct_url, MODEL, DIM) as direct,
        VectorStore(bouncer.format(database=DATABASE), MODEL, DIM, 6, statement_cache_size=0) as pooled,
    ):
        await without_statistics(direct)
        await direct.delete_documents([d.doc_id for d in await direct.list_documents()])
        yield direct, pooled


N_DOCS = 800
"""Documents of two chunks each: enough for the planner to prefer the HNSW index to sorting every chunk. Without
statistics the planner estimates a table's rows from its pages and its columns' widths; the `groups` columns of the
documents and chunks (row-level security) lowered those estimates enough that 400 documents planned the filtered
dense search as a sort (measured: 400 sorts, 800 and 1,500 scan the index)."""


def corpus() -> list[DocumentRecord]:
    docs = [record(f"animals/{i:03d}", [TEXTS[i % 5], TEXTS[(i + 2) % 5]], f"v{i}", f"s{i % 3}") for i in range(N_DOCS)]
    return [
        DocumentRecord(d.doc_id, d.title, d.source, d.content_hash, d.chunks, {"group": i % 4})
        for i, d in enumerate(docs)
    ]


async def searches(store: VectorStore) -> list[Any]:
    """Every search mode over a few queries, as plain values."""
    out: list[Any] = []
    for seed in range(5):
        query = unit_vector(1000 + seed)
        for kwargs in ({}, {"ef_search": 200}, {"metadata_filter": {"group": 1}}, {"exact": True}):
            out.append([(h.chunk_id, round(h.score, 5)) for h in await store.dense_search(query, 10, **kwargs)])
        out.append(await store.cosine_similarities(query, ["animals/000#0", "animals/007#1", "nope#0"]))
    for text in ("zebras stripes", "giraffe necks acacia", "burrows"):
        for rank, match in (("bm25", "any"), ("bm25_exhaustive", "any"), ("ts_rank_cd", "all"), ("ts_rank_cd", "any")):
            hits = await store.full_text_search(text, 10, match=match, rank=rank)  # type: ignore[arg-type]
            out.append([(h.chunk_id, round(h.score, 5)) for h in hits])
    out.append(await store.get_document("animals/003"))
    return out


async def listing(store: VectorStore) -> list[Any]:
    page = await store.document_page(limit=15)
    second = await store.document_page(limit=15, cursor=page.next_cursor)
    return [
        [(d.doc_id, d.chunks, d.content_hash) for d in await store.list_documents()],
        [d.doc_id for d in page.documents + second.documents],
        page.total,
        await store.count(),
        await store.stored_versions(["animals/001", "missing"]),
        [d.doc_id async for d in store.iter_documents(page_size=7)],
    ]


async def search_plan(store: VectorStore, sql: str, args: str, **settings: Any) -> tuple[dict[str, str], list[str]]:
    """The settings inside a search transaction and the nodes of the search statement's plan there."""
    async with store.search_session(**settings) as conn:
        values = {name: await conn.fetchval(f"SELECT current_setting('{name}')") for name in SEARCH_SETTINGS}
        await conn.execute(f"PREPARE plan_check AS {sql}")
        plans = [await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE plan_check({args})") for _ in range(7)]
        await conn.execute("DEALLOCATE plan_check")
    nodes = [[n.get("Index Name") or n["Node Type"] for n in walk(json.loads(p)[0]["Plan"])] for p in plans]
    assert all(n == nodes[0] for n in nodes), nodes  # no switch to a generic plan after five executions
    return values, nodes[0]


def walk(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from walk(child)


async def test_every_store_operation_through_pgbouncer_matches_a_direct_connection(
    stores: tuple[VectorStore, VectorStore],
) -> None:
    direct, pooled = stores
    counts = await pooled.add_documents(corpus())  # ingest through PgBouncer
    assert (counts.added, counts.chunks) == (N_DOCS, 2 * N_DOCS)
    assert (await pooled.add_documents(corpus())).skipped == N_DOCS
    await direct.rebuild_full_text()
    await pooled.rebuild_full_text()
    assert await listing(pooled) == await listing(direct)
    expected = await searches(direct)
    assert await searches(pooled) == expected
    # concurrent searches share 3 server connections: each statement stays on its transaction's server
    assert all(r == expected for r in await asyncio.gather(*(searches(pooled) for _ in range(6))))

    query = "'[" + ",".join(f"{x:.6f}" for x in unit_vector(7)) + "]'::vector"
    for sql, args, kwargs in (
        (DENSE_SQL, f"{query}, 10", {}),
        (DENSE_FILTERED_SQL, f"""{query}, 10, '{{"group": 2}}'""", {}),
        (DENSE_SQL, f"{query}, 10", {"ef_search": 250, "exact": True}),
    ):
        through_pgbouncer, plan = await search_plan(pooled, sql, args, **kwargs)
        assert (through_pgbouncer, plan) == await search_plan(direct, sql, args, **kwargs)
        assert through_pgbouncer["hnsw.iterative_scan"] == "strict_order"
        assert through_pgbouncer["plan_cache_mode"] == "force_custom_plan"
        assert through_pgbouncer["hnsw.ef_search"] == str(kwargs.get("ef_search", 100))
        assert ("chunks_embedding_hnsw" in plan) != kwargs.get("exact", False), plan
    async with pooled.pool.acquire() as conn:  # outside a search transaction: the server's defaults, nothing leaked
        assert await conn.fetchval("SHOW hnsw.ef_search") == "40"
        assert await conn.fetchval("SHOW plan_cache_mode") == "auto"

    deleted = await pooled.delete_documents(["animals/005", "animals/006"], source="s2")
    assert deleted == sorted({"animals/005", "animals/006"} | {f"animals/{i:03d}" for i in range(N_DOCS) if i % 3 == 2})
    assert await listing(pooled) == await listing(direct)
    assert await searches(pooled) == await searches(direct)


def test_docs_list_streams_every_page_through_pgbouncer_without_a_statement_cache(
    settings: Settings, triton_server: Settings, bouncer: str, stores: tuple[VectorStore, VectorStore]
) -> None:
    """Each `rag` run connects anew; through one PgBouncer server connection no run may leave a named prepared
    statement behind for the next (asyncpg's `__asyncpg_stmt_N__` names repeat in every client). The listing
    spans more than one page (`agent.cli.main.LIST_PAGE`)."""
    n = LIST_PAGE + 150
    asyncio.run(add_many(stores[0].dsn, n))
    ids = [f"many/{i:05d}" for i in range(n)]
    env = cli_env(settings) | {"DATABASE_URL": bouncer.format(database=DATABASE), "DB_STATEMENT_CACHE_SIZE": "0"}

    def rag(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "agent", "docs", "list", *args], env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert [d["doc_id"] for d in json.loads(rag("--json"))] == ids
    assert [d["doc_id"] for d in json.loads(rag("--json", "--offset", "40", "--limit", str(LIST_PAGE + 5)))] == ids[
        40 : 45 + LIST_PAGE
    ]
    table = rag()
    assert table.rstrip().endswith(f"{n} documents") and "many/00000" in table and f"many/{n - 1:05d}" in table


async def add_many(url: str, n: int) -> None:
    async with VectorStore(url, MODEL, DIM) as store:
        vector = unit_vector(0)
        await store.add_documents(
            [
                DocumentRecord(f"many/{i:05d}", f"t{i}", "many", f"h{i}", [ChunkRecord(0, f"x {i}", 2, vector)])
                for i in range(n)
            ]
        )


async def test_restricted_reads_through_pgbouncer_see_only_their_groups_and_leave_nothing_behind(
    stores: tuple[VectorStore, VectorStore],
) -> None:
    direct, pooled = stores
    secret = dataclasses.replace(record("secret", ["zebra secret stripes"]), metadata={"groups": ["eng"]})
    await direct.add_documents([record("open", ["zebra open stripes"]), secret])
    eng, nobody = SearchScope().read_by(caller_access(["eng"])), SearchScope().read_by(NOBODY)
    for _ in range(6):  # more than the pool's 3 server connections: each is reused by every kind of read
        seen = await asyncio.gather(
            pooled.full_text_search("zebra", 10, rank="bm25", scope=nobody),
            pooled.full_text_search("zebra", 10, rank="bm25"),
            pooled.dense_search(unit_vector(3), 10, scope=eng),
            pooled.list_documents(access=NOBODY),
        )
        assert {h.doc_id for h in seen[0]} == {"open"}
        assert {h.doc_id for h in seen[1]} == {"open", "secret"}  # no role or groups left on the connection
        assert "secret" in {h.doc_id for h in seen[2]}
        assert [d.doc_id for d in seen[3]] == ["open"]
