"""Retrieval: dense (HNSW cosine), full-text (Postgres `tsvector`) and their hybrid by a convex combination of
normalised scores or reciprocal rank fusion (`tools.fusion`); the full-text leg optionally with RM3 feedback
(`tools.rm3`). How it ranks is one `tools.retrieval_config.RetrievalConfig`.

`PassageSearch` is what the answering agent needs of retrieval (search, read a document); `Retriever` implements it
over the embedder and the store, `tools.in_memory.InMemoryCollection` over documents held in memory (tests).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol, Unpack

import numpy as np
import numpy.typing as npt

from tools.fusion import convex_fusion, reciprocal_rank_fusion
from tools.records import ChunkHit, FullTextMatch, FullTextOptions, TextKind
from tools.rerank import PairScorer, rerank
from tools.retrieval_config import RetrievalConfig, RetrievalMode
from tools.rm3 import FeedbackStore, rm3_search
from tools.scope import SearchScope
from tools.timing import StageTimings


class QueryEmbedder(Protocol):
    """What the retriever needs of an embedder (`tools.embedder.TritonEmbedder`)."""

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        """`(len(texts), dim)` float32 L2-normalised embeddings."""
        ...


class SearchStore(Protocol):
    """What the retriever and the agent need of a store (`tools.store.VectorStore`)."""

    async def dense_search(
        self,
        query: npt.NDArray[np.float32],
        top_k: int,
        ef_search: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
        exact: bool = False,
        scope: SearchScope | None = None,
    ) -> list[ChunkHit]:
        """Nearest chunks by cosine similarity, best first, only from documents in `scope` (None: all)."""
        ...

    async def full_text_search(
        self, query: str, top_k: int, match: FullTextMatch = "all", **options: Unpack[FullTextOptions]
    ) -> list[ChunkHit]:
        """Chunks by full-text score, best first, only from documents in `options["scope"]` (absent or None: all)."""
        ...

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """(title, full text) of a stored document in `scope` (None: any), None when not stored there."""
        ...

    async def cosine_similarities(self, query: npt.NDArray[np.float32], chunk_ids: list[str]) -> dict[str, float]:
        """{chunk_id: cosine similarity of `query` to its stored embedding} for the stored ones."""
        ...


@dataclass(frozen=True, kw_only=True)
class Passage(ChunkHit):
    """A retrieved chunk (the `ChunkHit` fields) numbered for citation (`number` from 1, in rank order).

    `score` is the ranking score of the mode used: cosine similarity (dense), the full-text score (BM25 or
    `ts_rank_cd`) or the fused score (hybrid: RRF, or the convex combination of normalised scores), or the
    cross-encoder's logit when the rerank step re-ordered it
    (`tools.rerank`); `dense_score` is the chunk's cosine similarity (−1..1) to the query
    (`PassageSearch.search` fills it for every passage it returns; None only for a passage built elsewhere).
    """

    number: int
    dense_score: float | None = None

    @classmethod
    def of(cls, number: int, hit: ChunkHit, score: float, dense_score: float | None = None) -> Passage:
        """The passage numbered `number` for `hit`, ranked with `score`."""
        shared = {f.name: getattr(hit, f.name) for f in fields(ChunkHit)}
        return cls(**{**shared, "score": score}, number=number, dense_score=dense_score)


@dataclass
class RetrievalResult:
    """Passages for one query with stage timings in ms (`embed`, `search`)."""

    query: str
    passages: list[Passage]
    timings_ms: dict[str, float] = field(default_factory=dict)


class PassageSearch(Protocol):
    """What the answering agent needs of retrieval: one search per query, and whole documents to read.

    Implementations: `Retriever` (Triton + Postgres), `tools.in_memory.InMemoryCollection` (in memory, tests).
    """

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        """Up to `top_k` passages for `query` from the documents in `scope` (None: every document), numbered from
        1, best first, each with its `dense_score` (the query's cosine similarity to the chunk, whatever the
        ranking mode). A document outside `scope` never contributes a passage, a score or a count.

        Raises:
            ValueError: blank query or top_k < 1.
            tools.errors.EmbedderError / tools.errors.StoreError (real implementations): retrieval failed.
        """
        ...

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """(title, full text) of a stored document in `scope` (None: any); None when it is not stored there (a
        document outside the scope reads exactly like a missing one)."""
        ...


def text_key(hit: ChunkHit) -> str:
    """The identity of a hit's content: sha1 hex of its chunk text (the same text under two doc ids is one key)."""
    return hashlib.sha1(hit.text.encode("utf-8")).hexdigest()


def unique_texts(hits: Sequence[ChunkHit]) -> list[ChunkHit]:
    """`hits` without the later ones whose chunk text equals an earlier one's (same content under two doc ids)."""
    seen: set[str] = set()
    out: list[ChunkHit] = []
    for hit in hits:
        item = text_key(hit)
        if item not in seen:
            seen.add(item)
            out.append(hit)
    return out


@dataclass
class CandidateLists:
    """The two ranked lists one query produces before fusion, with stage timings in ms: `embed` (the query
    embedding) and `search` (the longer of the two store searches, which run concurrently)."""

    dense: list[ChunkHit]
    full_text: list[ChunkHit]
    timings_ms: dict[str, float]
    query_vector: npt.NDArray[np.float32] | None = None
    """The query's embedding `(dim,)` float32, when it was embedded (dense or hybrid mode, or asked for)."""


def rank_candidates(lists: CandidateLists, config: RetrievalConfig) -> list[tuple[ChunkHit, float]]:
    """(hit, score) best first for `config.mode`, no chunk text twice: the dense or full-text list as is, or for
    `hybrid` their fusion by `config.fusion`: the convex combination of normalised scores (`config.alpha` the dense
    share, `config.normalisation`; `tools.fusion.convex_fusion`) or weighted RRF (`config.rrf_k`, `config.weights` =
    (dense, full-text); `tools.fusion.reciprocal_rank_fusion`). Pure: no embedder or store involved.
    """
    if config.mode == "hybrid":
        if config.fusion == "convex":
            return convex_fusion(lists.dense, lists.full_text, config.alpha, config.normalisation, key=text_key)
        return reciprocal_rank_fusion(
            [lists.dense, lists.full_text], k=config.rrf_k, weights=config.weights, key=text_key
        )
    return [(h, h.score) for h in unique_texts(lists.dense if config.mode == "dense" else lists.full_text)]


class Retriever:
    """Turns a query into numbered passages using the embedder and the store, ranked as `config` says.

    Args:
        embedder: connected Triton embedder (queries get the model's query prefix).
        store: connected vector store.
        config: how to rank (`tools.retrieval_config.RetrievalConfig`; default: the app's defaults); the app's is
            its settings' (`agent.core.wiring.retrieval_config`).
        reranker: the cross-encoder of the rerank step (`tools.rerank`), or None (no reranking whatever
            `config.rerank_depth`).

    A search asks each list for `config.candidates` hits (at least `top_k`, and at least `rerank_depth` when
    reranking), so that hits dropped as duplicate texts still leave `top_k` passages.

    Raises:
        ValueError: RM3 in `config` over a store without term vectors (`tools.rm3.FeedbackStore`).
    """

    def __init__(
        self,
        embedder: QueryEmbedder,
        store: SearchStore,
        config: RetrievalConfig = RetrievalConfig(),  # noqa: B008 (frozen: one shared default is safe)
        reranker: PairScorer | None = None,
    ) -> None:
        if config.rm3 is not None and not isinstance(store, FeedbackStore):
            raise ValueError("RM3 feedback needs a store with term vectors (`tools.rm3.FeedbackStore`)")
        self.embedder = embedder
        self.store = store
        self.config = config
        self.reranker = reranker
        self.rerank_depth = config.rerank_depth if reranker is not None else 0
        """Hits the reranker re-orders: `config.rerank_depth`, 0 without a reranker."""

    async def candidate_lists(
        self,
        query: str,
        size: int,
        mode: RetrievalMode | None = None,
        *,
        embed_query: bool = False,
        scope: SearchScope | None = None,
    ) -> CandidateLists:
        """The dense and full-text lists of `size` hits each that `mode` (default: this retriever's) needs;
        a list the mode does not use is empty. The query is embedded for dense search, or when `embed_query`
        (then concurrently with full-text search). Both legs search only the documents in `scope` (None: all).

        Raises:
            ValueError: blank query or size < 1.
            EmbedderError / StoreError: from the embedder or store.
        """
        if not query.strip():
            raise ValueError("query is empty; expected a non-blank question")
        if size < 1:
            raise ValueError(f"size={size}; expected >= 1")
        config = self.config
        mode = mode or config.mode
        timings, legs = StageTimings(), StageTimings()
        timings.add({"embed": 0.0, "search": 0.0})
        vector: npt.NDArray[np.float32] | None = None
        dense: list[ChunkHit] = []
        full_text: list[ChunkHit] = []

        async def dense_leg() -> None:
            nonlocal dense, vector
            with timings.stage("embed"):
                vector = (await self.embedder.embed([query], kind="query"))[0]
            if mode != "full_text":
                with legs.stage("dense_search", size=size):
                    dense = await self.store.dense_search(vector, size, ef_search=config.ef_search, scope=scope)

        async def full_text_leg() -> None:
            nonlocal full_text
            with legs.stage("full_text_search", size=size):
                full_text = await self.store.full_text_search(
                    query,
                    size,
                    match=config.full_text_match,
                    rank=config.full_text_rank,
                    k1=config.bm25_k1,
                    b=config.bm25_b,
                    scope=scope,
                )
                if config.rm3 is not None and isinstance(self.store, FeedbackStore):
                    full_text = await rm3_search(
                        self.store,
                        query,
                        full_text,
                        size,
                        config.rm3,
                        rank=config.full_text_rank,
                        k1=config.bm25_k1,
                        b=config.bm25_b,
                        scope=scope,
                    )

        try:
            async with asyncio.TaskGroup() as group:
                if mode in ("dense", "hybrid") or embed_query:
                    group.create_task(dense_leg())
                if mode in ("full_text", "hybrid"):
                    group.create_task(full_text_leg())
        except BaseExceptionGroup as group_error:
            raise group_error.exceptions[0] from None
        timings.add({"search": max(legs.as_dict().values(), default=0.0)})
        return CandidateLists(dense, full_text, timings.as_dict(), vector)

    def rank(self, lists: CandidateLists, mode: RetrievalMode | None = None) -> list[tuple[ChunkHit, float]]:
        """(hit, score) best first for `mode` (default: this retriever's); see `rank_candidates`."""
        return rank_candidates(lists, self.config if mode is None else replace(self.config, mode=mode))

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        """Retrieve up to `top_k` passages for `query` from the documents in `scope` (None: all), numbered from 1
        for citation, no chunk text twice, each with its dense cosine similarity to the query (`PassageSearch.search`).

        A passage that dense search did not return (full-text mode, or a hybrid hit only full-text search found)
        gets its cosine from its stored embedding and the query vector this search embedded (one indexed lookup,
        counted in `search`); the query is embedded once per search in every mode. With a reranker and
        `rerank_depth` > 0 the first `rerank_depth` ranked hits are re-ordered by it before the cut
        (`tools.rerank.rerank`; its time is the stage `rerank`).

        Raises:
            ValueError: blank query or top_k < 1.
            EmbedderError / StoreError: from the embedder, the reranker or the store.
        """
        if top_k < 1:
            raise ValueError(f"top_k={top_k}; expected >= 1")
        size = max(top_k, self.config.candidates, self.rerank_depth)
        lists = await self.candidate_lists(query, size, embed_query=True, scope=scope)
        dense_scores = {h.chunk_id: h.score for h in lists.dense}
        ranked = self.rank(lists)
        timings = StageTimings()
        timings.add(lists.timings_ms)
        if self.reranker is not None and self.rerank_depth > 0:
            with timings.stage("rerank", pairs=min(self.rerank_depth, len(ranked))):
                ranked = await rerank(query, ranked, self.reranker, self.rerank_depth, top_k)
        ranked = ranked[:top_k]
        missing = [h.chunk_id for h, _ in ranked if h.chunk_id not in dense_scores]
        if missing and lists.query_vector is not None:
            with timings.stage("dense_scores", key="search", chunks=len(missing)):
                dense_scores |= await self.store.cosine_similarities(lists.query_vector, missing)
        passages = [Passage.of(n, h, score, dense_scores.get(h.chunk_id)) for n, (h, score) in enumerate(ranked, 1)]
        return RetrievalResult(query, passages, timings.as_dict())

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """(title, full text) of a stored document in `scope` (None: any); None when it is not stored there.

        Raises:
            StoreError: the store failed.
        """
        return await self.store.get_document(doc_id, scope)
