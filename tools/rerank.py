"""The rerank step: a cross-encoder re-orders the head of a fused ranking (`tools.retrieval.Retriever.search`).

Multi-stage ranking (Nogueira, Yang, Cho and Lin, "Multi-Stage Document Ranking with BERT", 2019): the cheap first
stage (dense + full-text, fused by RRF) finds candidates, the expensive cross-encoder scores only the first `depth`
of them against the question, and the top `top_k` of its order are returned. `depth` bounds the added cost: one
(question, passage) pair per candidate (`tools.embedder.reranker.TritonReranker` serves them through Triton).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tools.errors import EmbedderError
from tools.records import ChunkHit


class PairScorer(Protocol):
    """What the rerank step needs of a cross-encoder (`tools.embedder.reranker.TritonReranker`)."""

    async def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(passages),)` float32 relevance logits of (`query`, passage), higher is more relevant."""
        ...


async def rerank(
    query: str, ranked: Sequence[tuple[ChunkHit, float]], scorer: PairScorer, depth: int, top_k: int
) -> list[tuple[ChunkHit, float]]:
    """The top `top_k` of `ranked` after the cross-encoder re-orders its first `depth` hits.

    Args:
        query: the question, as the first stage searched it.
        ranked: (hit, first-stage score) best first (e.g. `tools.retrieval.rank_candidates`).
        scorer: the cross-encoder.
        depth: candidates reranked; 0 turns reranking off (the scorer is not called).
        top_k: hits returned (>= 1).

    Returns:
        Up to `top_k` (hit, score) pairs: the first `depth` hits by descending cross-encoder logit (that logit is
        their score; equal logits keep the first-stage order), then, when `top_k > depth`, the hits after `depth`
        in first-stage order with their first-stage scores.

    Raises:
        ValueError: depth < 0 or top_k < 1.
        tools.errors.EmbedderError: the scorer failed, or returned another number of scores than passages.
    """
    if depth < 0 or top_k < 1:
        raise ValueError(f"depth={depth}, top_k={top_k}; expected depth >= 0 and top_k >= 1")
    if depth == 0 or not ranked:
        return list(ranked[:top_k])
    head = list(ranked[:depth])
    scores = await scorer.score(query, [hit.text for hit, _ in head])
    if scores.shape != (len(head),):
        raise EmbedderError(f"reranker returned scores of shape {scores.shape} for {len(head)} passages")
    order = sorted(range(len(head)), key=lambda i: -float(scores[i]))  # stable: ties keep the first-stage order
    reordered = [(head[i][0], float(scores[i])) for i in order]
    return (reordered + list(ranked[depth:]))[:top_k]
