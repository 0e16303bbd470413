"""Retrieval: dense (HNSW cosine), full-text (Postgres `tsvector`) and their hybrid by reciprocal rank fusion.

RRF: score(d) = sum over lists of w / (k + rank(d)), rank from 1 (Cormack, Clarke and Buettcher, "Reciprocal Rank
Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009; k = 60 there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tools.embedder import TritonEmbedder
from tools.store import ChunkHit, FullTextMatch, FullTextRank, VectorStore
from tools.timing import timed

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
    """Fuse ranked lists by weighted reciprocal rank fusion.

    score(c) = sum over lists L containing c of weights[L] / (k + rank_L(c)), ranks from 1 (Cormack, Clarke and
    Buettcher, "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009,
    with k = 60 there; the per-list weights are the usual weighted-RRF extension).

    Args:
        ranked_lists: lists of hits, each best first; a chunk is identified by `chunk_id`.
        k: the RRF constant (> 0); larger k flattens the rank discount.
        weights: one weight per list (default 1.0 each).

    Returns:
        (hit, fused score) best first; ties broken by first appearance (list order, then rank).

    Raises:
        ValueError: k <= 0, or weights of another length than ranked_lists.
    """
    if k <= 0:
        raise ValueError(f"RRF k={k}; expected > 0")
    weights = weights or [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ValueError(f"{len(weights)} RRF weights for {len(ranked_lists)} ranked lists; expected one per list")
    scores: dict[str, float] = {}
    hits: dict[str, ChunkHit] = {}
    for hits_list, weight in zip(ranked_lists, weights, strict=True):
        for rank, hit in enumerate(hits_list, 1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight / (k + rank)
            hits.setdefault(hit.chunk_id, hit)
    order = sorted(scores, key=lambda cid: -scores[cid])
    return [(hits[cid], scores[cid]) for cid in order]


@dataclass
class CandidateLists:
    """The two ranked lists one query produces before fusion, with stage timings in ms (`embed`, `search`)."""

    dense: list[ChunkHit]
    full_text: list[ChunkHit]
    timings_ms: dict[str, float]


class Retriever:
    """Turns a query into numbered passages using the embedder and the store.

    Args:
        embedder: connected Triton embedder (queries get the model's query prefix).
        store: connected vector store.
        mode: `dense`, `full_text` or `hybrid` (RRF of both).
        ef_search: pgvector `hnsw.ef_search` for dense search (at least the rows asked for is used).
        rrf_k: RRF constant k.
        candidates: how many hits each list contributes to the fusion (at least top_k).
        weights: RRF weights of the (dense, full-text) lists.
        full_text_match: `all` (websearch syntax, every term) or `any` (any term), for `ts_rank_cd`.
        full_text_rank: `bm25` (Okapi BM25 over the stored lexemes) or `ts_rank_cd`; see
            `VectorStore.full_text_search`.
        bm25_k1, bm25_b: BM25 parameters (Anserini's 0.9 and 0.4 by default).
    """

    def __init__(
        self,
        embedder: TritonEmbedder,
        store: VectorStore,
        mode: RetrievalMode = "hybrid",
        ef_search: int = 100,
        rrf_k: float = 5.0,
        candidates: int = 50,
        weights: tuple[float, float] = (0.75, 1.0),
        full_text_match: FullTextMatch = "any",
        full_text_rank: FullTextRank = "bm25",
        bm25_k1: float = 0.9,
        bm25_b: float = 0.4,
    ) -> None:
        if mode not in ("dense", "full_text", "hybrid"):
            raise ValueError(f"retrieval mode {mode!r}; expected 'dense', 'full_text' or 'hybrid'")
        if rrf_k <= 0 or candidates < 1 or len(weights) != 2:
            raise ValueError(
                f"rrf_k={rrf_k}, candidates={candidates}, weights={weights}: expected rrf_k > 0, candidates >= 1 "
                f"and two weights (dense, full-text)"
            )
        self.embedder = embedder
        self.store = store
        self.mode = mode
        self.ef_search = ef_search
        self.rrf_k = rrf_k
        self.candidates = candidates
        self.weights = weights
        self.full_text_match = full_text_match
        self.full_text_rank = full_text_rank
        self.bm25_k1 = bm25_k1
        self.bm25_b = bm25_b

    async def candidate_lists(self, query: str, size: int, mode: RetrievalMode | None = None) -> CandidateLists:
        """The dense and full-text lists of `size` hits each that `mode` (default: this retriever's) needs;
        a list the mode does not use is empty.

        Raises:
            ValueError: blank query or size < 1.
            EmbedderError / StoreError: from the embedder or store.
        """
        if not query.strip():
            raise ValueError("query is empty; expected a non-blank question")
        if size < 1:
            raise ValueError(f"size={size}; expected >= 1")
        mode = mode or self.mode
        timings: dict[str, float] = {"embed": 0.0, "search": 0.0}
        dense: list[ChunkHit] = []
        full_text: list[ChunkHit] = []
        if mode in ("dense", "hybrid"):
            with timed("embed", timings):
                vector = (await self.embedder.embed([query], kind="query"))[0]
            with timed("dense_search", timings, key="search", size=size):
                dense = await self.store.dense_search(vector, size, ef_search=self.ef_search)
        if mode in ("full_text", "hybrid"):
            with timed("full_text_search", timings, key="search", size=size):
                full_text = await self.store.full_text_search(
                    query, size, match=self.full_text_match, rank=self.full_text_rank, k1=self.bm25_k1, b=self.bm25_b
                )
        return CandidateLists(dense, full_text, timings)

    def rank(self, lists: CandidateLists, mode: RetrievalMode | None = None) -> list[tuple[ChunkHit, float]]:
        """(hit, score) best first for `mode` (default: this retriever's): a list as is, or the RRF of both."""
        mode = mode or self.mode
        if mode == "hybrid":
            return reciprocal_rank_fusion([lists.dense, lists.full_text], k=self.rrf_k, weights=list(self.weights))
        return [(h, h.score) for h in (lists.dense if mode == "dense" else lists.full_text)]

    async def search(self, query: str, top_k: int) -> RetrievalResult:
        """Retrieve up to `top_k` passages for `query`, numbered from 1 for citation.

        Raises:
            ValueError: blank query or top_k < 1.
            EmbedderError / StoreError: from the embedder or store.
        """
        if top_k < 1:
            raise ValueError(f"top_k={top_k}; expected >= 1")
        size = top_k if self.mode == "dense" else max(top_k, self.candidates)
        lists = await self.candidate_lists(query, size)
        dense_scores = {h.chunk_id: h.score for h in lists.dense}
        passages = [
            Passage(n, h.chunk_id, h.doc_id, h.title, h.text, h.source, score, dense_scores.get(h.chunk_id))
            for n, (h, score) in enumerate(self.rank(lists)[:top_k], 1)
        ]
        return RetrievalResult(query, passages, lists.timings_ms)
