"""Retrieval: dense (HNSW cosine), full-text (`websearch_to_tsquery`) and their hybrid by reciprocal rank fusion.

RRF: score(d) = sum over lists of w / (k + rank(d)), rank from 1 (Cormack, Clarke and Buettcher, "Reciprocal Rank
Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009; k = 60 there).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from tools.embedder import TritonEmbedder
from tools.store import ChunkHit, VectorStore

RetrievalMode = Literal["dense", "full_text", "hybrid"]


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk numbered for citation (`number` from 1, in rank order).

    `score` is the ranking score of the mode used: cosine similarity (dense), `ts_rank_cd` (full text) or the RRF
    score (hybrid); `dense_score` is the chunk's cosine similarity to the query when dense search saw it.
    """

    number: int
    chunk_id: str
    doc_id: str
    title: str
    text: str
    source: str
    score: float
    dense_score: float | None = None


@dataclass
class RetrievalResult:
    """Passages for one query with stage timings in ms (`embed`, `search`)."""

    query: str
    passages: list[Passage]
    timings_ms: dict[str, float] = field(default_factory=dict)


def reciprocal_rank_fusion(
    ranked_lists: list[list[ChunkHit]], k: float = 60.0, weights: list[float] | None = None
) -> list[tuple[ChunkHit, float]]:
    """Fuse ranked lists by RRF; returns (hit, fused score) best first, ties broken by first appearance."""
    weights = weights or [1.0] * len(ranked_lists)
    scores: dict[str, float] = {}
    hits: dict[str, ChunkHit] = {}
    for hits_list, weight in zip(ranked_lists, weights, strict=True):
        for rank, hit in enumerate(hits_list, 1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight / (k + rank)
            hits.setdefault(hit.chunk_id, hit)
    order = sorted(scores, key=lambda cid: -scores[cid])
    return [(hits[cid], scores[cid]) for cid in order]


class Retriever:
    """Turns a query into numbered passages using the embedder and the store.

    Args:
        embedder: connected Triton embedder (queries get the model's query prefix).
        store: connected vector store.
        mode: `dense`, `full_text` or `hybrid` (RRF of both).
        ef_search: pgvector `hnsw.ef_search` for dense search.
        rrf_k: RRF constant k; candidates: how many hits each list contributes to the fusion.
    """

    def __init__(
        self,
        embedder: TritonEmbedder,
        store: VectorStore,
        mode: RetrievalMode = "hybrid",
        ef_search: int = 100,
        rrf_k: float = 60.0,
        candidates: int = 50,
    ) -> None:
        self.embedder = embedder
        self.store = store
        self.mode = mode
        self.ef_search = ef_search
        self.rrf_k = rrf_k
        self.candidates = candidates

    async def search(self, query: str, top_k: int) -> RetrievalResult:
        """Retrieve up to `top_k` passages for `query`.

        Raises:
            ValueError: blank query or top_k < 1.
            EmbedderError / StoreError: from the embedder or store.
        """
        if not query.strip():
            raise ValueError("query is empty; expected a non-blank question")
        if top_k < 1:
            raise ValueError(f"top_k={top_k}; expected >= 1")
        timings: dict[str, float] = {"embed": 0.0, "search": 0.0}
        dense: list[ChunkHit] = []
        full_text: list[ChunkHit] = []
        pool = top_k if self.mode == "dense" else max(top_k, self.candidates)
        if self.mode in ("dense", "hybrid"):
            start = time.perf_counter()
            vector = (await self.embedder.embed([query], kind="query"))[0]
            timings["embed"] = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            dense = await self.store.dense_search(vector, pool, ef_search=self.ef_search)
            timings["search"] += (time.perf_counter() - start) * 1000
        if self.mode in ("full_text", "hybrid"):
            start = time.perf_counter()
            full_text = await self.store.full_text_search(query, pool)
            timings["search"] += (time.perf_counter() - start) * 1000
        dense_scores = {h.chunk_id: h.score for h in dense}
        if self.mode == "hybrid":
            ranked = reciprocal_rank_fusion([dense, full_text], k=self.rrf_k)
        else:
            ranked = [(h, h.score) for h in (dense or full_text)]
        passages = [
            Passage(n, h.chunk_id, h.doc_id, h.title, h.text, h.source, score, dense_scores.get(h.chunk_id))
            for n, (h, score) in enumerate(ranked[:top_k], 1)
        ]
        return RetrievalResult(query, passages, timings)
