"""Hybrid fusion by normalised scores, and pseudo-relevance feedback (RM3) for the full-text leg.

Convex combination (Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 42(1),
2023): each list's scores are normalised, then fused as alpha * dense + (1 - alpha) * lexical. Normalisations:

- `min_max`: (s - min) / (max - min) over the list's returned scores;
- `z_score`: (s - mean) / standard deviation over the list's returned scores;
- `tmm` (theoretical min-max, their best-performing choice): (s - m) / (max - m), m the score's theoretical lower
  bound (−1 for cosine similarity, 0 for BM25) instead of the list's observed minimum.

A chunk absent from one list (below its cut-off) takes that list's lowest normalised score, the score of the last
hit it returned: it ranked at best there. Bruch et al. find the convex combination more effective than RRF in and
out of domain once alpha is tuned on a few queries, and stable in alpha.

RM3 (Lavrenko and Croft, "Relevance-Based Language Models", SIGIR 2001; the RM3 interpolation of Abdul-Jaleel et
al., "UMass at TREC 2004"), as in Anserini's `Rm3Reranker` (Yang, Fang and Lin, "Anserini", JDIQ 2018): the top
`fb_docs` chunks of the first BM25 search give a relevance model P(w|R) ∝ sum over d of P(w|d) * score(d), with
P(w|d) = tf(w, d) / |d|; its `fb_terms` heaviest terms, L1-normalised, are interpolated with the L1-normalised
original query as lambda * query + (1 - lambda) * feedback, and that weighted query is run as BM25 again
(`VectorStore.weighted_full_text_search`). Like Anserini, feedback terms skip lexemes shorter than 2 or longer
than 20 characters, with other than [a-z0-9], or in more than 10% of the chunks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args, runtime_checkable

import numpy as np

from tools.records import ChunkHit, FullTextRank, TermVectors
from tools.scope import SearchScope

FusionMethod = Literal["rrf", "convex"]
FUSION_METHODS: tuple[FusionMethod, ...] = get_args(FusionMethod)
Normalisation = Literal["min_max", "z_score", "tmm"]
NORMALISATIONS: tuple[Normalisation, ...] = get_args(Normalisation)
THEORETICAL_MIN = (-1.0, 0.0)
"""Lower bounds of the (dense, full-text) scores for `tmm`: cosine similarity and BM25."""


def normalise(scores: Sequence[float], method: Normalisation, theoretical_min: float = 0.0) -> list[float]:
    """`scores` normalised by `method` (see the module docstring); `theoretical_min` is the bound `tmm` uses.

    A list whose scores are all equal normalises to 1.0 each (min-max, tmm when max = the bound) or 0.0 each
    (z-score): no spread, no preference.

    Raises:
        ValueError: unknown method.
    """
    if method not in NORMALISATIONS:
        raise ValueError(f"normalisation {method!r}; expected one of {NORMALISATIONS}")
    if not scores:
        return []
    values = np.asarray(scores, dtype=np.float64)
    if method == "z_score":
        std = float(values.std())
        return [0.0] * len(values) if std == 0 else ((values - values.mean()) / std).tolist()
    low = float(values.min()) if method == "min_max" else theoretical_min
    span = float(values.max()) - low
    return [1.0] * len(values) if span <= 0 else ((values - low) / span).tolist()


def convex_fusion(
    dense: Sequence[ChunkHit],
    lexical: Sequence[ChunkHit],
    alpha: float,
    normalisation: Normalisation = "min_max",
    key: Callable[[ChunkHit], str] = lambda hit: hit.chunk_id,
) -> list[tuple[ChunkHit, float]]:
    """Fuse a dense and a lexical list by a convex combination of normalised scores (Bruch et al., TOIS 2023).

    score(c) = alpha * norm_dense(c) + (1 - alpha) * norm_lexical(c); a chunk missing from a list gets that list's
    lowest normalised score (an empty list contributes 0).

    Args:
        dense: hits best first, `score` a cosine similarity.
        lexical: hits best first, `score` a BM25 score.
        alpha: weight of the dense list, 0..1.
        normalisation: `min_max`, `z_score` or `tmm` (bounds `THEORETICAL_MIN`).
        key: what identifies one item across lists (within a list only its first appearance counts).

    Returns:
        (hit, fused score) best first, the hit being the item's first appearance (dense list first); ties by
        first appearance.

    Raises:
        ValueError: alpha outside 0..1 or an unknown normalisation.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"convex fusion alpha={alpha}; expected 0..1")
    fused: dict[str, float] = {}
    hits: dict[str, ChunkHit] = {}
    parts: list[tuple[dict[str, float], float, float]] = []
    for hits_list, weight, bound in zip((dense, lexical), (alpha, 1.0 - alpha), THEORETICAL_MIN, strict=True):
        firsts: dict[str, ChunkHit] = {}
        for hit in hits_list:
            firsts.setdefault(key(hit), hit)
        normed = normalise([h.score for h in firsts.values()], normalisation, bound)
        parts.append((dict(zip(firsts, normed, strict=True)), min(normed, default=0.0), weight))
        for item, hit in firsts.items():
            hits.setdefault(item, hit)
    for item in hits:
        fused[item] = sum(weight * scores.get(item, floor) for scores, floor, weight in parts)
    order = sorted(hits, key=lambda item: -fused[item])
    return [(hits[item], fused[item]) for item in order]


@dataclass(frozen=True)
class Rm3Params:
    """RM3 feedback parameters (Anserini's defaults: 10 documents, 10 terms, original-query weight 0.5).

    Attributes:
        fb_docs: top chunks of the first search the relevance model is estimated from (>= 1).
        fb_terms: expansion terms kept (>= 1).
        original_weight: lambda, the original query's share of the final query weights (0..1).
    """

    fb_docs: int = 10
    fb_terms: int = 10
    original_weight: float = 0.5

    def __post_init__(self) -> None:
        if self.fb_docs < 1 or self.fb_terms < 1 or not 0.0 <= self.original_weight <= 1.0:
            raise ValueError(f"{self}: expected fb_docs >= 1, fb_terms >= 1 and original_weight in 0..1")


_FEEDBACK_TERM = re.compile(r"[a-z0-9]{2,20}")
MAX_FEEDBACK_DF = 0.1
"""Feedback terms in more than this share of the chunks are skipped (Anserini's RM3 filter)."""


def rm3_terms(
    query_lexemes: Sequence[str], feedback: Sequence[ChunkHit], vectors: TermVectors, params: Rm3Params
) -> dict[str, float]:
    """The RM3 query {lexeme: weight > 0} (see the module docstring), weights summing to 1.

    Args:
        query_lexemes: the query's distinct `english` lexemes (weight 1 / their number each).
        feedback: the first search's hits, best first (its top `params.fb_docs` are used; scores > 0).
        vectors: term statistics of (at least) those hits (`VectorStore.term_vectors`).
        params: RM3 parameters.

    Returns:
        The interpolated query; the original query alone when no feedback term qualifies.
    """
    model: dict[str, float] = {}
    for hit in feedback[: params.fb_docs]:
        tf = {t: n for t, n in vectors.tf.get(hit.chunk_id, {}).items() if _qualifies(t, vectors)}
        length = sum(tf.values())
        if length == 0 or hit.score <= 0:
            continue
        for term, count in tf.items():
            model[term] = model.get(term, 0.0) + count / length * hit.score
    top = sorted(model.items(), key=lambda kv: (-kv[1], kv[0]))[: params.fb_terms]
    mass = sum(w for _, w in top)
    query = dict.fromkeys(query_lexemes, 1.0 / len(query_lexemes)) if query_lexemes else {}
    if mass <= 0:
        return query
    weights = {t: params.original_weight * w for t, w in query.items()}
    for term, weight in top:
        weights[term] = weights.get(term, 0.0) + (1.0 - params.original_weight) * weight / mass
    return {t: w for t, w in weights.items() if w > 0}


def _qualifies(term: str, vectors: TermVectors) -> bool:
    if not _FEEDBACK_TERM.fullmatch(term):
        return False
    return vectors.chunks <= 0 or vectors.df.get(term, 0) / vectors.chunks <= MAX_FEEDBACK_DF


@runtime_checkable
class FeedbackStore(Protocol):
    """What RM3 needs of a store besides the first search (`tools.store.VectorStore`)."""

    async def term_vectors(self, chunk_ids: Sequence[str]) -> TermVectors:
        """Stored term statistics of `chunk_ids`."""
        ...

    async def weighted_full_text_search(
        self,
        terms: Mapping[str, float],
        top_k: int,
        rank: FullTextRank = "bm25",
        k1: float | None = None,
        b: float | None = None,
        scope: SearchScope | None = None,
    ) -> list[ChunkHit]:
        """BM25 of a weighted lexeme query, best first."""
        ...

    async def query_lexemes(self, query: str) -> list[str]:
        """The distinct `english` lexemes of `query`, as full-text search analyses it."""
        ...


async def rm3_search(
    store: FeedbackStore,
    query: str,
    first: Sequence[ChunkHit],
    top_k: int,
    params: Rm3Params,
    rank: FullTextRank = "bm25",
    k1: float | None = None,
    b: float | None = None,
    scope: SearchScope | None = None,
) -> list[ChunkHit]:
    """The RM3 second search for `query` from its first BM25 hits `first` (best first): up to `top_k` hits of the
    expanded, weighted query, best first, from the documents in `scope`; `first` itself when it is empty.

    Raises:
        StoreError: from the store.
    """
    if not first:
        return list(first)
    lexemes = await store.query_lexemes(query)
    vectors = await store.term_vectors([h.chunk_id for h in first[: params.fb_docs]])
    terms = rm3_terms(lexemes, first, vectors, params)
    if not terms:
        return list(first)
    return await store.weighted_full_text_search(terms, top_k, rank=rank, k1=k1, b=b, scope=scope)
