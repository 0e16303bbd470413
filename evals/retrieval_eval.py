"""The SciFact retrieval eval: dense, full-text and hybrid retrieval through the real stack (Triton embedder, pgvector).

Protocol (BEIR, Thakur et al. NeurIPS 2021 D&B): the document is title + text, the query is the claim as is, the
metrics are nDCG@10, recall@10, recall@100 and MRR@10 over the split's judged queries (`evals.metrics`).
Two corpus variants, each in its own Postgres database on the same server so that the app's database is untouched
and a re-run reuses the stored vectors (documents are keyed by content hash; only missing ones are embedded):

- `passage` (the reproduction): one passage per document; the embedder truncates it at the model's 256 tokens
  ([CLS] and [SEP] included), as sentence-transformers does; full-text search sees the whole abstract.
- `chunked`: the app's chunking (`CHUNK_TOKENS`/`CHUNK_OVERLAP_TOKENS` token windows); a document's score is its
  best chunk's (its first appearance in the chunk ranking).

HNSW recall@10 compares the index's top 10 at the configured `hnsw.ef_search` with an exact scan's top 10 on the
same vectors; latencies are of sequential single queries (store only, the embedding excluded).

Reference figures for SciFact test, nDCG@10: all-MiniLM-L6-v2 0.6451 (MTEB leaderboard), BM25 0.6789 (Anserini
flat, BEIR paper / Pyserini), bge-large-en-v1.5 0.7461 (its model card).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import numpy.typing as npt

from agent.config.settings import Settings
from agent.core.wiring import build_embedder, build_retriever, build_store, ingest_options
from evals.metrics import evaluate
from evals.scifact import CorpusDoc, Qrels, Query
from tools.embedder import TritonEmbedder
from tools.ingest import SourceDocument, ingest_documents
from tools.records import ChunkHit, ChunkRecord, DocumentRecord
from tools.retrieval import CandidateLists, Retriever, rank_candidates
from tools.retrieval_config import RETRIEVAL_MODES, RetrievalConfig, RetrievalMode
from tools.stats import percentiles
from tools.store import VectorStore

Variant = Literal["passage", "chunked"]
MODES: tuple[RetrievalMode, ...] = RETRIEVAL_MODES
REFERENCE_NDCG10 = {
    "all-MiniLM-L6-v2 dense (MTEB)": 0.6451,
    "BM25 (Anserini, BEIR)": 0.6789,
    "bge-large-en-v1.5 dense (model card)": 0.7461,
}
"""Published SciFact test nDCG@10 figures this eval is compared with."""

DEPTH = 100
"""Documents ranked per query (recall@100 needs 100)."""

ProgressFn = Callable[[str, int, int], None]
"""Called as (stage, done, total)."""


@dataclass
class VariantReport:
    """Figures of one corpus variant: metrics per mode, HNSW recall@10 against exact search, latencies in ms."""

    variant: Variant
    database: str
    n_docs: int
    n_chunks: int
    metrics: dict[str, dict[str, float]]
    hnsw_recall_at_10: float
    latency_ms: dict[str, float]
    lists: dict[str, CandidateLists] = field(default_factory=dict, repr=False)
    """query id -> the candidate lists (kept for tuning the fusion without re-querying)."""

    def to_json(self) -> dict[str, object]:
        """The scripted form: `{mode: {metric: value}}` plus `hnsw_recall@10`, sizes and latencies."""
        return {
            **self.metrics,
            "hnsw_recall@10": self.hnsw_recall_at_10,
            "latency_ms": self.latency_ms,
            "n_docs": self.n_docs,
            "n_chunks": self.n_chunks,
            "database": self.database,
        }


def database_name(prefix: str, variant: Variant, settings: Settings) -> str:
    """Postgres database name of one variant, e.g. `rag_eval_scifact_passage_all_minilm_l6_v2`.

    The chunked variant's name carries the chunk window, so a changed window gets its own database.
    """
    parts = [prefix, variant, settings.embedder_model]
    if variant == "chunked":
        parts += [f"c{settings.chunk_tokens}", f"o{settings.chunk_overlap_tokens}"]
    name = re.sub(r"[^a-z0-9_]+", "_", "_".join(parts).lower())
    return name[:63]  # Postgres identifier limit


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` (the path of a `postgresql://` URL), query string kept."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


async def ensure_database(url: str, name: str) -> str:
    """Create database `name` on the server of `url` unless it exists; return its URL.

    Raises:
        asyncpg.PostgresError: the server refused (e.g. no CREATEDB privilege).
    """
    conn = await asyncpg.connect(url)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):  # created concurrently
                await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(url, name)


async def ingest_passages(
    docs: Sequence[CorpusDoc],
    embedder: TritonEmbedder,
    store: VectorStore,
    source: str,
    batch: int = 64,
    progress: ProgressFn | None = None,
) -> None:
    """Store each document as one passage (title + text) whose embedding is of its first `max_tokens` tokens.

    Documents already stored with the same content are skipped before embedding. The embedder's per-text
    truncation log is silenced here: truncation at `max_tokens` is this variant's protocol.
    """
    stored = await store.stored_versions([d.doc_id for d in docs])
    todo = [d for d in docs if stored.get(d.doc_id) != SourceDocument(d.doc_id, d.title, d.text, "", {}).content_hash]
    for i in range(0, len(todo), batch):
        part = todo[i : i + batch]
        contents = [d.content for d in part]
        embed_log = logging.getLogger("tools.embedder")
        level = embed_log.level
        embed_log.setLevel(logging.ERROR)
        try:
            vectors = await embedder.embed(contents, kind="document")
        finally:
            embed_log.setLevel(level)
        lengths = [len(e.ids) for e in embedder.tokenizer.encode_batch(contents, add_special_tokens=False)]
        await store.add_documents(
            [
                DocumentRecord(
                    d.doc_id,
                    d.title,
                    source,
                    SourceDocument(d.doc_id, d.title, d.text, "", {}).content_hash,
                    [ChunkRecord(0, d.content, n, v)],
                )
                for d, n, v in zip(part, lengths, vectors, strict=True)
            ]
        )
        if progress is not None:
            progress("embed passages", min(i + batch, len(todo)), len(todo))


async def ingest_chunked(
    docs: Sequence[CorpusDoc],
    embedder: TritonEmbedder,
    store: VectorStore,
    settings: Settings,
    source: str,
    progress: ProgressFn | None = None,
) -> None:
    """Store the documents through the app's ingestion (token-window chunks); stored content is skipped."""
    sources = [SourceDocument(d.doc_id, d.title, d.text, source, {}) for d in docs]
    batch = settings.ingest_batch_docs
    for i in range(0, len(sources), batch):
        await ingest_documents(sources[i : i + batch], embedder, store, ingest_options(settings))
        if progress is not None:
            progress("embed chunks", min(i + batch, len(sources)), len(sources))


def doc_ranking(ranked: Sequence[ChunkHit], depth: int = DEPTH) -> list[str]:
    """Doc ids best first from a chunk ranking: a document ranks at its best chunk (first appearance)."""
    seen: dict[str, None] = {}
    for hit in ranked:
        seen.setdefault(hit.doc_id, None)
        if len(seen) == depth:
            break
    return list(seen)


async def hnsw_recall(
    store: VectorStore, vectors: npt.NDArray[np.float32], ef_search: int, k: int = 10
) -> tuple[float, dict[str, float]]:
    """Mean |HNSW top-k ∩ exact top-k| / k over query `vectors` `(n, dim)`, and sequential query latencies (ms):
    `hnsw_p50`, `hnsw_p95`, `exact_p50`, `exact_p95`."""
    overlaps: list[float] = []
    hnsw_ms: list[float] = []
    exact_ms: list[float] = []
    for vector in vectors:
        start = time.perf_counter()
        approx = await store.dense_search(vector, k, ef_search=ef_search)
        hnsw_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        exact = await store.dense_search(vector, k, exact=True)
        exact_ms.append((time.perf_counter() - start) * 1000)
        truth = {h.chunk_id for h in exact}
        overlaps.append(len(truth & {h.chunk_id for h in approx}) / max(1, len(truth)))
    latency = {
        f"{name}_{key}": float(value)
        for name, values in (("hnsw", hnsw_ms), ("exact", exact_ms))
        for key, value in percentiles(values, (50, 95)).items()
        if key != "n"
    }
    return statistics.fmean(overlaps), latency


BM25_PARAMS = {"k1": 0.9, "b": 0.4}
"""Anserini's BM25 defaults, used for BEIR's BM25 figure (Lin et al., "Pyserini", SIGIR 2021)."""


async def bm25_lists(store: VectorStore, queries: Sequence[Query], size: int) -> dict[str, list[ChunkHit]]:
    """BM25 over the store's chunks with `bm25s` (Lù, 2024; Lucene's BM25 variant, k1 = 0.9, b = 0.4, English
    stop words, Snowball English stemmer via PyStemmer): query id -> up to `size` hits with score > 0, best first.

    The comparison the issue asks for: how far Postgres' `ts_rank_cd` sits from a real BM25 on the same text.
    """
    import bm25s  # type: ignore[import-untyped]
    import Stemmer  # type: ignore[import-not-found]

    logging.getLogger("bm25s").setLevel(logging.WARNING)

    rows = await store.pool.fetch(
        "SELECT c.chunk_id, d.doc_id, d.title, c.text, d.source FROM chunks c JOIN documents d ON d.id = c.document_id"
        " ORDER BY c.id"
    )
    stemmer = Stemmer.Stemmer("english")
    corpus_tokens = bm25s.tokenize(
        [r["text"] for r in rows], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    index = bm25s.BM25(method="lucene", **BM25_PARAMS)
    index.index(corpus_tokens, show_progress=False)
    query_tokens = bm25s.tokenize(
        [q.text for q in queries], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    found, scores = index.retrieve(query_tokens, k=min(size, len(rows)), show_progress=False)
    out: dict[str, list[ChunkHit]] = {}
    for query, ids, vals in zip(queries, found, scores, strict=True):
        out[query.query_id] = [
            ChunkHit(
                rows[i]["chunk_id"], rows[i]["doc_id"], rows[i]["title"], rows[i]["text"], rows[i]["source"], float(v)
            )
            for i, v in zip(ids, vals, strict=True)
            if v > 0
        ]
    return out


def score_lists(
    retriever: Retriever, lists: dict[str, CandidateLists], qrels: Qrels, depth: int = DEPTH
) -> dict[str, dict[str, float]]:
    """Metrics per mode from the candidate lists of each query, ranked by `retriever`'s own `rank`."""
    return {
        mode: evaluate(
            qrels, {q: doc_ranking([h for h, _ in retriever.rank(cl, mode)], depth) for q, cl in lists.items()}
        )
        for mode in MODES
    }


async def evaluate_variant(
    variant: Variant,
    docs: Sequence[CorpusDoc],
    queries: Sequence[Query],
    qrels: Qrels,
    embedder: TritonEmbedder,
    settings: Settings,
    server_url: str,
    db_prefix: str = "rag_eval_scifact",
    source: str = "scifact",
    progress: ProgressFn | None = None,
    concurrency: int = 4,
) -> VariantReport:
    """Ingest `docs` as `variant` into its own database (reused when present), run every query in every mode.

    Args:
        server_url: any database URL of the Postgres server; the variant's database is created beside it.
        concurrency: queries in flight while collecting the ranked lists.

    Raises:
        EmbedderError / StoreError / asyncpg.PostgresError: from the stack.
    """
    name = database_name(db_prefix, variant, settings)
    url = await ensure_database(server_url, name)
    spec = embedder.spec
    async with build_store(url, spec.name, spec.dim, settings) as store:
        if variant == "passage":
            await ingest_passages(docs, embedder, store, source, settings.ingest_batch_docs, progress)
        else:
            await ingest_chunked(docs, embedder, store, settings, source, progress)
        n_docs, n_chunks = await store.count()
        retriever = build_retriever(embedder, store, settings)
        # chunked: several chunks of one document share the list, so fetch more chunks to fill DEPTH documents
        size = DEPTH if variant == "passage" else min(1000, 3 * DEPTH)
        limiter = asyncio.Semaphore(concurrency)
        lists: dict[str, CandidateLists] = {}

        async def collect(query: Query) -> None:
            async with limiter:
                lists[query.query_id] = await retriever.candidate_lists(query.text, size, mode="hybrid")
            if progress is not None:
                progress(f"query {variant}", len(lists), len(queries))

        await asyncio.gather(*(collect(q) for q in queries))
        metrics = score_lists(retriever, lists, qrels)
        bm25 = await bm25_lists(store, queries, size)
        metrics["bm25s"] = evaluate(qrels, {q: doc_ranking(hits) for q, hits in bm25.items()})
        metrics["hybrid_bm25s"] = evaluate(
            qrels,
            {
                q: doc_ranking([h for h, _ in retriever.rank(CandidateLists(cl.dense, bm25[q], {}), "hybrid")])
                for q, cl in lists.items()
            },
        )
        vectors = await embedder.embed([q.text for q in queries], kind="query")
        recall, latency = await hnsw_recall(store, vectors, settings.hnsw_ef_search)
    latency["embed_p50"] = float(percentiles([cl.timings_ms["embed"] for cl in lists.values()], (50,))["p50"])
    return VariantReport(variant, name, n_docs, n_chunks, metrics, recall, latency, lists)


@dataclass
class RetrievalEvalReport:
    """The whole eval: one `VariantReport` per corpus variant, the split and the query count."""

    split: str
    n_queries: int
    variants: dict[str, VariantReport]

    def to_json(self) -> dict[str, object]:
        """`{"dense"|"full_text"|"hybrid": {metric: value}, "hnsw_recall@10", "n_queries"}` of the `passage`
        (reproduction) variant at the top level, every variant under `variants`, and the reference figures."""
        main = self.variants.get("passage") or next(iter(self.variants.values()))
        return {
            **main.metrics,
            "hnsw_recall@10": main.hnsw_recall_at_10,
            "n_queries": self.n_queries,
            "split": self.split,
            "variants": {name: v.to_json() for name, v in self.variants.items()},
            "reference_ndcg@10": REFERENCE_NDCG10,
        }


async def run_retrieval_eval(
    settings: Settings,
    server_url: str,
    docs: Sequence[CorpusDoc],
    queries: Sequence[Query],
    qrels: Qrels,
    split: str = "test",
    variants: Sequence[Variant] = ("passage", "chunked"),
    db_prefix: str = "rag_eval_scifact",
    progress: ProgressFn | None = None,
    source: str = "scifact",
) -> RetrievalEvalReport:
    """Run the eval for `variants` with one Triton embedder built from `settings`.

    Args:
        server_url: a database URL of the Postgres server that gets the eval databases.
        docs, queries, qrels: the corpus, the split's queries and their judgements (see `evals.scifact`).
        db_prefix: database name prefix (tests and other datasets use their own).
        source: the stored documents' `source`.

    Raises:
        ValueError: no queries, or queries without qrels.
        EmbedderError / StoreError / asyncpg.PostgresError: from the stack.
    """
    if not queries:
        raise ValueError("no queries to evaluate")
    missing = [q.query_id for q in queries if q.query_id not in qrels]
    if missing:
        raise ValueError(f"{len(missing)} queries have no qrels, e.g. {missing[:3]}")
    qrels = {q.query_id: qrels[q.query_id] for q in queries}
    reports: dict[str, VariantReport] = {}
    async with build_embedder(settings) as embedder:
        for variant in variants:
            reports[variant] = await evaluate_variant(
                variant, docs, queries, qrels, embedder, settings, server_url, db_prefix, source, progress
            )
    return RetrievalEvalReport(split, len(queries), reports)


RRF_K_GRID = (5.0, 10.0, 20.0, 40.0, 60.0, 100.0)
DENSE_WEIGHT_GRID = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def tune_fusion(
    report: VariantReport,
    qrels: Qrels,
    k_grid: Sequence[float] = RRF_K_GRID,
    dense_weight_grid: Sequence[float] = DENSE_WEIGHT_GRID,
) -> list[tuple[float, float, dict[str, float]]]:
    """Grid search of the RRF constant k and the dense list's weight (full-text weight 1) on the kept candidate
    lists of `report`; run it on the train split only. Returns (k, dense weight, metrics) best nDCG@10 first."""
    results: list[tuple[float, float, dict[str, float]]] = []
    for k in k_grid:
        for weight in dense_weight_grid:
            config = RetrievalConfig(fusion="rrf", rrf_k=k, weights=(weight, 1.0))
            metrics = evaluate(
                qrels,
                {q: doc_ranking([h for h, _ in rank_candidates(cl, config)]) for q, cl in report.lists.items()},
            )
            results.append((k, weight, metrics))
    return sorted(results, key=lambda r: -r[2]["ndcg@10"])
