"""Pseudo-relevance feedback (RM3) for the full-text leg of retrieval (`tools.retrieval`).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, Unpack, runtime_checkable

from tools.records import ChunkHit, FullTextOptions, TermVectors


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
        self, terms: Mapping[str, float], top_k: int, **options: Unpack[FullTextOptions]
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
    **options: Unpack[FullTextOptions],
) -> list[ChunkHit]:
    """The RM3 second search for `query` from its first BM25 hits `first` (best first): up to `top_k` hits of the
    expanded, weighted query, best first, from the documents in `options["scope"]`, ranked by `options["rank"]`
    (default `bm25`) with its `k1`, `b`; `first` itself when it is empty.

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
    return await store.weighted_full_text_search(terms, top_k, **options)
