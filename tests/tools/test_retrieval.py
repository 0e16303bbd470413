"""Retrieval against the real Postgres + pgvector (and Triton for the Retriever): filtered HNSW search against an
exact scan, full-text query forms, numbered passages, and the embedder check at start-up."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import numpy as np
import pytest

from evals.retrieval_eval import ensure_database
from evals.scifact import load_corpus
from tests.store_helpers import without_statistics
from tools.embedder import TritonEmbedder
from tools.errors import StoreError
from tools.records import ChunkRecord, DocumentRecord
from tools.retrieval import Retriever
from tools.retrieval_config import RetrievalConfig
from tools.store import BM25_SQL, DENSE_FILTERED_SQL, DENSE_SQL, VectorStore

pytestmark = pytest.mark.stack

DIM = 384
GROUPS = 50
N_DOCS = 2000


def unit_vectors(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
async def random_store(postgres_url: str) -> AsyncIterator[VectorStore]:
    """2,000 one-chunk documents with random unit vectors, document i in metadata group i % 50; never analysed
    (`without_statistics`), so the planner takes the HNSW scan that these tests are about."""
    url = await ensure_database(postgres_url, "test_retrieval_random")
    async with VectorStore(url, "all-minilm-l6-v2", DIM) as store:
        await without_statistics(store)
        if (await store.count())[1] != N_DOCS:
            vectors = unit_vectors(N_DOCS, seed=7)
            await store.add_documents(
                [
                    DocumentRecord(
                        f"r{i}",
                        f"doc {i}",
                        "random",
                        f"h{i}",
                        [ChunkRecord(0, f"text {i}", 2, vectors[i])],
                        {"group": i % GROUPS},
                    )
                    for i in range(N_DOCS)
                ]
            )
        yield store


@pytest.mark.parametrize("top_k", [10, 100])
async def test_filtered_hnsw_search_returns_min_k_matches(random_store: VectorStore, top_k: int) -> None:
    """A 2% filter: a plain HNSW scan with ef_search=40 would find about 40 * 2% of rows; the iterative scan
    keeps going until min(top_k, 40 matching) rows are found, near the exact scan's."""
    matches = N_DOCS // GROUPS
    overlaps = []
    for query in unit_vectors(5, seed=11):
        approx = await random_store.dense_search(query, top_k, ef_search=40, metadata_filter={"group": 7})
        exact = await random_store.dense_search(query, top_k, metadata_filter={"group": 7}, exact=True)
        assert len(approx) == len(exact) == min(top_k, matches)
        assert all(int(h.doc_id[1:]) % GROUPS == 7 for h in approx)
        assert [h.score for h in approx] == sorted((h.score for h in approx), reverse=True)
        overlaps.append(len({h.chunk_id for h in approx} & {h.chunk_id for h in exact}) / len(exact))
    print(f"filtered recall@{top_k}: {np.mean(overlaps):.3f}")
    assert float(np.mean(overlaps)) >= 0.8


async def test_hnsw_top_10_agrees_with_exact_scan(random_store: VectorStore) -> None:
    overlaps = []
    for query in unit_vectors(20, seed=3):
        approx = {h.chunk_id for h in await random_store.dense_search(query, 10, ef_search=100)}
        exact = await random_store.dense_search(query, 10, exact=True)
        assert exact[0].score == pytest.approx(max(h.score for h in exact))
        overlaps.append(len(approx & {h.chunk_id for h in exact}) / 10)
    print(f"unfiltered recall@10: {np.mean(overlaps):.3f}")
    # random 384-d vectors are HNSW's hard case; SciFact's real vectors are checked by the eval test
    assert float(np.mean(overlaps)) >= 0.9


async def test_dense_search_rejects_bad_top_k(random_store: VectorStore) -> None:
    with pytest.raises(StoreError, match="top_k=0"):
        await random_store.dense_search(unit_vectors(1, 0)[0], 0)


async def test_refused_embedder_writes_nothing(postgres_url: str, random_store: VectorStore) -> None:
    url = await ensure_database(postgres_url, "test_retrieval_random")
    with pytest.raises(StoreError, match=r"'all-minilm-l6-v2' \(dim 384\).*'bge-large-en-v1.5' \(dim 1024\)"):
        async with VectorStore(url, "bge-large-en-v1.5", 1024):
            pass
    conn = await asyncpg.connect(url)
    try:
        meta = {r["key"]: r["value"] for r in await conn.fetch("SELECT key, value FROM rag_meta")}
        chunks = await conn.fetchval("SELECT count(*) FROM chunks")
    finally:
        await conn.close()
    assert meta == {"embedder_model": "all-minilm-l6-v2", "dim": "384"}
    assert chunks == N_DOCS


@pytest.fixture(scope="module")
async def scifact_store(postgres_url: str, embedder: TritonEmbedder) -> AsyncIterator[VectorStore]:
    """Ten SciFact abstracts, one chunk each, embedded on Triton."""
    docs = list(load_corpus().values())[:10]
    url = await ensure_database(postgres_url, "test_retrieval_scifact")
    async with VectorStore(url, embedder.spec.name, embedder.spec.dim) as store:
        vectors = await embedder.embed([d.content for d in docs])
        await store.add_documents(
            [
                DocumentRecord(d.doc_id, d.title, "scifact", f"h{d.doc_id}", [ChunkRecord(0, d.content, 100, v)])
                for d, v in zip(docs, vectors, strict=True)
            ]
        )
        yield store


async def test_full_text_any_matches_a_claim_that_all_terms_miss(scifact_store: VectorStore) -> None:
    # doc 4983: "Microstructural development of human newborn cerebral white matter assessed in vivo by diffusion
    # tensor magnetic resonance imaging." The question adds words the abstract lacks.
    query = "Is diffusion tensor imaging of newborn white matter related to autism or schizophrenia?"
    assert await scifact_store.full_text_search(query, 5, match="all") == []
    hits = await scifact_store.full_text_search(query, 5, match="any")
    assert hits[0].doc_id == "4983"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_hybrid_passages_are_numbered_for_citation(scifact_store: VectorStore, embedder: TritonEmbedder) -> None:
    retriever = Retriever(embedder, scifact_store, RetrievalConfig(fusion="rrf", rrf_k=60, weights=(1.0, 0.5)))
    result = await retriever.search("newborn cerebral white matter diffusion tensor MRI", top_k=3)
    assert [p.number for p in result.passages] == [1, 2, 3]
    top = result.passages[0]
    assert (top.doc_id, top.chunk_id, top.source) == ("4983", "4983#0", "scifact")
    # first in both lists: 1/(60+1) + 0.5/(60+1)
    assert top.score == pytest.approx(1.5 / 61)
    assert top.dense_score is not None and 0.4 < top.dense_score <= 1.0
    assert set(result.timings_ms) == {"embed", "search"}


def plan_nodes(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, index or relation name) of every node of an EXPLAIN (FORMAT JSON) plan tree, depth first."""
    own = (plan["Node Type"], plan.get("Index Name") or plan.get("Relation Name") or "")
    return [own] + [node for child in plan.get("Plans", []) for node in plan_nodes(child)]


def vector_literal(vector: np.ndarray) -> str:
    return "'[" + ",".join(f"{x:.6f}" for x in vector) + "]'::vector"


@pytest.mark.parametrize("statement", ["dense", "dense_filtered", "bm25"])
async def test_search_statements_keep_their_plan_after_five_executions(
    random_store: VectorStore, statement: str
) -> None:
    """Postgres plans a prepared statement with its parameters for five executions, then may switch to a generic
    plan; a search transaction forces custom plans, so executions 6-10 use the 1st's plan (the index scans)."""
    query = vector_literal(unit_vectors(1, seed=5)[0])
    sql, args, index = {
        "dense": (DENSE_SQL, f"{query}, 10", "chunks_embedding_hnsw"),
        "dense_filtered": (DENSE_FILTERED_SQL, f"""{query}, 10, '{{"group": 7}}'""", "chunks_embedding_hnsw"),
        "bm25": (BM25_SQL, "'text 17 of doc', 10, 0.9, 0.4, 100", "bm25_postings_impact"),
    }[statement]
    async with random_store.pool.acquire() as conn, conn.transaction():
        await conn.execute(random_store.search_settings())
        await conn.execute(f"PREPARE plan_check AS {sql}")
        plans = [
            plan_nodes(json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE plan_check({args})"))[0]["Plan"])
            for _ in range(10)
        ]
        await conn.execute("DEALLOCATE plan_check")
    assert any(name == index for _, name in plans[0]), plans[0]
    assert not any(kind == "Seq Scan" and name in ("chunks", "bm25_postings") for kind, name in plans[0])
    assert all(plan == plans[0] for plan in plans[5:]), plans[5]


SEARCH_SETTINGS = ("hnsw.ef_search", "hnsw.iterative_scan", "plan_cache_mode")


async def test_search_settings_hold_per_transaction_and_never_leak(random_store: VectorStore) -> None:
    async with random_store.pool.acquire() as conn:
        async with conn.transaction():
            await conn.execute(random_store.search_settings())
            inside = {name: await conn.fetchval(f"SELECT current_setting('{name}')") for name in SEARCH_SETTINGS}
        outside = {name: await conn.fetchval(f"SELECT current_setting('{name}')") for name in SEARCH_SETTINGS}
    assert inside == {
        "hnsw.ef_search": "100",
        "hnsw.iterative_scan": "strict_order",
        "plan_cache_mode": "force_custom_plan",
    }
    assert outside == {"hnsw.ef_search": "40", "hnsw.iterative_scan": "off", "plan_cache_mode": "auto"}  # server's
    # a per-call ef_search applies to its own search: ef_search=1 loses recall on random vectors
    misses = {1: 0, 400: 0}
    for query in unit_vectors(20, seed=9):
        exact = (await random_store.dense_search(query, 1, exact=True))[0].chunk_id
        for ef in misses:
            misses[ef] += (await random_store.dense_search(query, 1, ef_search=ef))[0].chunk_id != exact
    assert misses[400] < misses[1], misses
    async with random_store.pool.acquire() as conn:
        assert await conn.fetchval("SHOW hnsw.ef_search") == "40"  # SET LOCAL did not leak into the pool


async def test_dense_search_rejects_non_finite_query(random_store: VectorStore) -> None:
    query = unit_vectors(1, 0)[0].copy()
    query[3] = np.nan
    with pytest.raises(StoreError, match="non-finite"):
        await random_store.dense_search(query, 5)
