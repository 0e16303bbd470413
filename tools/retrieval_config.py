"""How retrieval ranks: one frozen `RetrievalConfig` (mode, candidates, fusion and its parameters, full-text
matching and ranking, BM25 parameters, HNSW `ef_search`, RM3, rerank depth) that the `Retriever`
(`tools.retrieval`) and the in-memory double (`tools.in_memory.InMemoryCollection`) both rank with.

Its defaults are the app's (`agent.config.settings.Settings`: hybrid retrieval fused by the convex combination,
alpha 0.8 with theoretical min-max normalisation, BM25 full text of any term); `agent.core.wiring.retrieval_config`
builds it from the settings in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from tools.fusion import FUSION_METHODS, NORMALISATIONS, FusionMethod, Normalisation
from tools.records import FullTextMatch, FullTextRank
from tools.rm3 import Rm3Params

RetrievalMode = Literal["dense", "full_text", "hybrid"]
"""`dense` (HNSW cosine), `full_text` (BM25 or `ts_rank_cd`) or `hybrid` (both, fused)."""
RETRIEVAL_MODES: tuple[RetrievalMode, ...] = get_args(RetrievalMode)
"""Every retrieval mode, in the order the evals and benchmarks report them."""
FULL_TEXT_MATCHES: tuple[FullTextMatch, ...] = get_args(FullTextMatch)
FULL_TEXT_RANKS: tuple[FullTextRank, ...] = get_args(FullTextRank)


@dataclass(frozen=True)
class RetrievalConfig:
    """How one retrieval ranks; the defaults are the app's settings' defaults.

    Attributes:
        mode: `dense`, `full_text` or `hybrid` (fusion of both).
        candidates: hits each list contributes to the fusion (a search asks for at least `top_k`, and at least
            `rerank_depth` when reranking), >= 1.
        fusion: how `hybrid` fuses: `convex` (normalised scores, `tools.fusion.convex_fusion`) or `rrf`
            (`tools.fusion.reciprocal_rank_fusion`).
        rrf_k: the RRF constant k (> 0).
        weights: RRF weights of the (dense, full-text) lists.
        alpha: the convex fusion's dense share (0..1).
        normalisation: the convex fusion's score normalisation (`min_max`, `z_score`, `tmm`).
        full_text_match: `all` (websearch syntax, every term) or `any` (any term), for `ts_rank_cd`.
        full_text_rank: `bm25` (pruned Okapi BM25), `bm25_exhaustive` or `ts_rank_cd`; see
            `VectorStore.full_text_search`.
        bm25_k1, bm25_b: BM25 parameters (Anserini's 0.9 and 0.4).
        ef_search: pgvector `hnsw.ef_search` for dense search (at least the rows asked for is used), >= 1.
        rm3: RM3 feedback for the full-text leg (`tools.rm3`; None: none); needs BM25 ranking.
        rerank_depth: ranked hits a reranker re-orders before the top `top_k` are cut; 0: no reranking.

    Raises:
        ValueError: any value outside the ranges above, an unknown mode, fusion, normalisation or full-text
            option, or RM3 with `ts_rank_cd`.
    """

    mode: RetrievalMode = "hybrid"
    candidates: int = 50
    fusion: FusionMethod = "convex"
    rrf_k: float = 5.0
    weights: tuple[float, float] = (0.75, 1.0)
    alpha: float = 0.8
    normalisation: Normalisation = "tmm"
    full_text_match: FullTextMatch = "any"
    full_text_rank: FullTextRank = "bm25"
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    ef_search: int = 100
    rm3: Rm3Params | None = None
    rerank_depth: int = 0

    def __post_init__(self) -> None:
        if self.mode not in RETRIEVAL_MODES:
            raise ValueError(f"retrieval mode {self.mode!r}; expected 'dense', 'full_text' or 'hybrid'")
        if self.fusion not in FUSION_METHODS or self.normalisation not in NORMALISATIONS or not 0 <= self.alpha <= 1:
            raise ValueError(
                f"fusion={self.fusion!r}, alpha={self.alpha}, normalisation={self.normalisation!r}: expected one of "
                f"{FUSION_METHODS}, alpha in 0..1 and one of {NORMALISATIONS}"
            )
        if self.rrf_k <= 0 or self.candidates < 1 or len(self.weights) != 2:
            raise ValueError(
                f"rrf_k={self.rrf_k}, candidates={self.candidates}, weights={self.weights}: expected rrf_k > 0, "
                f"candidates >= 1 and two weights (dense, full-text)"
            )
        if self.full_text_match not in FULL_TEXT_MATCHES or self.full_text_rank not in FULL_TEXT_RANKS:
            raise ValueError(
                f"full_text_match={self.full_text_match!r}, full_text_rank={self.full_text_rank!r}: expected one of "
                f"{FULL_TEXT_MATCHES} and one of {FULL_TEXT_RANKS}"
            )
        if self.ef_search < 1:
            raise ValueError(f"ef_search={self.ef_search}; expected >= 1")
        if self.rm3 is not None and self.full_text_rank == "ts_rank_cd":
            raise ValueError("RM3 feedback needs BM25 full-text ranking")
        if self.rerank_depth < 0:
            raise ValueError(f"rerank_depth={self.rerank_depth}; expected >= 0 (0: no reranking)")
